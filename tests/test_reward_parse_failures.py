"""Parse failures reach the trainers' metrics: the verl entry points' flags, summed per step by the dara_sync
trainer's helper, become the tiny scale's column in the converted logs (the tiny trainer's column is checked in
test_tiny_trainer.py)."""

import numpy as np

from dara.verl_plugin.rewards import compute_toolcall_score, parse_failure_metrics_from_extra_fields

GT = '<think>x</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
GOOD = '<think>w</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
NESTED = "<think>w</think>\n<tool_call>\n" + "[" * 5000 + "]" * 5000 + "\n</tool_call>"


class Wrapped:
    """A non-tensor entry as TensorDict hands it back: the dict under `.data`."""

    def __init__(self, data):
        self.data = data


def test_step_metrics_count_each_channels_failures():
    infos = [compute_toolcall_score("rlla", text, GT, with_think_length=True) for text in (GOOD, NESTED, "no tags")]
    assert [info["parse_failure/correctness"] for info in infos] == [0.0, 1.0, 1.0]
    rows = np.empty(3, dtype=object)
    rows[:] = [{"reward_extra_info": infos[0]}, Wrapped({"reward_extra_info": infos[1]}), {"reward_extra_info": infos[2]}]
    metrics = parse_failure_metrics_from_extra_fields(rows, ["format", "correctness", "think_length"])
    # "no tags" has no think block either; format judges layouts and never fails to read one.
    assert metrics == {"dara/reward_parse_failures/format": 0.0, "dara/reward_parse_failures/correctness": 2.0,
                       "dara/reward_parse_failures/think_length": 1.0}


def test_reward_functions_without_flags_add_no_metric():
    rows = [{"reward_extra_info": {"format": 1.0, "correctness": 3.0}}] * 2
    assert parse_failure_metrics_from_extra_fields(rows, ["format", "correctness"]) == {}


def test_verl_logs_carry_the_counts_into_the_shared_column():
    from dara.verl_backend.logs import metrics_frame

    steps = {1: {"training/global_step": 1, "dara/reward/format": 0.5, "dara/reward_parse_failures/format": 3.0}}
    frame = metrics_frame(steps, ["format"])
    assert frame["reward_parse_failures/format"].tolist() == [3.0]


def test_the_dara_trainer_step_logs_the_counts(monkeypatch):
    import pytest

    pytest.importorskip("verl")
    import test_verl_plugin as plugin_tests  # its in-memory TransferQueue and batch builder

    from dara.verl_plugin.estimators import VERL_ESTIMATOR_NAMES

    rewards = np.array([[1.0, 3.0], [0.0, -3.0], [1.0, 1.0], [0.0, -3.0]])
    meta, fields, _ = plugin_tests.make_batch(rewards, groups=1, lengths=[2, 3, 2, 3])
    for position, row in enumerate(fields["extra_fields"]):
        unread = float(rewards[position, 1] == -3.0)
        row["reward_extra_info"].update({"parse_failure/format": 0.0, "parse_failure/correctness": unread})
    monkeypatch.setattr(plugin_tests.trainer_base, "tq", plugin_tests.FakeTransferQueue(fields))
    metrics: dict = {}
    plugin_tests.make_trainer(VERL_ESTIMATOR_NAMES["dara_sym"])._compute_advantage(meta, metrics)
    assert metrics["dara/reward_parse_failures/correctness"] == 2.0
    assert metrics["dara/reward_parse_failures/format"] == 0.0
