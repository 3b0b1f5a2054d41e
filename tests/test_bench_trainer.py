"""`make bench-trainer` runs today's experiment settings through an older revision's trainer: what that revision's
task does not take is left out by name, never passed (a TypeError) nor dropped unsaid."""

import json

import pytest

from benchmarks.bench_trainer import with_known_task_options
from dara.experiments import load_experiment
from dara.runs import find_run
from dara.tasks import TASK_CLASSES


class OldTask:
    def __init__(self, seed_source=None, /, format_rate: float = 0.05, *, no_tool_rate: float = 0.15):
        pass


class TaskTakingAnything:
    def __init__(self, **options):
        pass


def _spec(options: dict) -> dict:
    return {"coordinates": {"task": "toolcall", "method": "gdpo", "group_size": 4, "seed": 0},
            "settings": {"steps": 5, "task_options": options}, "policy": "unused"}


def test_options_an_old_task_does_not_take_as_keywords_are_named_and_left_out():
    options = {"format_rate": 0.012, "no_tool_rate": 0.1, "wrong_key_rate": 0.65, "seed_source": 1}
    spec, left_out = with_known_task_options(_spec(options), {"toolcall": OldTask})
    assert spec["settings"]["task_options"] == {"format_rate": 0.012, "no_tool_rate": 0.1}
    assert left_out == ["seed_source", "wrong_key_rate"]  # a positional-only parameter is not a keyword
    assert spec["settings"]["steps"] == 5 and spec["coordinates"]["task"] == "toolcall"


def test_a_task_taking_any_keyword_or_a_revision_without_task_classes_gets_every_option():
    options = {"wrong_key_rate": 0.65}
    assert with_known_task_options(_spec(options), {"toolcall": TaskTakingAnything}) == (_spec(options), [])
    assert with_known_task_options(_spec(options), None) == (_spec(options), [])


def test_this_checkouts_task_takes_every_option_of_the_benchmarked_run():
    run = find_run(load_experiment("tiny"), "toolcall", "dara_sym", 8, 0)
    options = run.settings["task_options"]
    assert options, "the benchmarked run has task options to check"
    spec = {"coordinates": {"task": run.task}, "settings": {"task_options": options}}
    assert with_known_task_options(spec, TASK_CLASSES)[1] == []


def test_the_phases_the_trainer_times_are_the_phases_its_history_rows_name():
    from benchmarks import bench_trainer, history

    assert list(bench_trainer.PHASE_NAMES) == [*bench_trainer.PHASES, "other"]
    assert tuple(bench_trainer.PHASE_NAMES.values()) == history.TRAINER_PHASES


def test_a_recorded_run_appends_the_rows_its_view_shows(tmp_path, monkeypatch):
    """main() end to end with each side's training replaced by fixed timings: the view it writes and the history rows
    it appends say the same."""
    from benchmarks import bench_trainer, history

    def fake_side(src, spec):
        old = src != bench_trainer.ROOT / "src"  # the old trainer is extracted into a temporary folder
        steps = spec["settings"]["steps"]
        total = (0.8 if old else 0.4) * steps
        sft = spec["sft"]
        return {"dara": str(src / "dara" / "__init__.py"), "seconds": [total / steps] * steps,
                "phases": {"sampling": 0.3 * total, "logprobs": 0.2 * total, "update": 0.4 * total},
                "response_length": 34.0, "ignored": ["lr_warmup_updates"] if old else [],
                "sft_seconds": [0.12 if old else 0.04] * sft["steps"]}

    monkeypatch.setattr(bench_trainer, "run_side", fake_side)
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    out, path = tmp_path / "bench_trainer.md", tmp_path / "bench_history.csv"
    bench_trainer.main(["--policy", str(policy), "--method", "gdpo", "--group-size", "4", "--steps", "2",
                        "--repeats", "2", "--sft-steps", "3", "--revision", "bf5bb9d", "--matmul", "torch",
                        "--attention", "sdpa", "--out", str(out),
                        "--history", str(path)])
    shown = history.parse_bench_trainer(out.read_text())
    rows = history.read_history(path)
    assert rows["settings"].iloc[0] == shown.settings == "toolcall, gdpo, G4, 2 steps each, matmul torch, one " \
                                                         "thread; 2 interleaved repetitions"
    assert set(rows["baseline_revision"]) == {shown.baseline_revision} == {"bf5bb9d"}
    assert rows[["case", "metric"]].values.tolist() == [[m["case"], m["metric"]] for m in shown.measurements]
    step = rows.iloc[0]
    assert (step["value"], step["baseline_value"], step["ratio"]) == (400.0, 800.0, 2.0)
    assert step["notes"].endswith("the old trainer ran without what it does not know: lr_warmup_updates")
    assert rows.set_index("case").loc["update", "value"] == pytest.approx(40.0)
    warm = rows.set_index("case").loc["warm-start step"]
    assert (warm["value"], warm["baseline_value"], warm["ratio"]) == (40.0, 120.0, 3.0)
    assert "Warm-start step old/new: **3.00x**" in out.read_text()


def test_an_openblas_side_trains_a_copy_of_the_policy_that_names_it(tmp_path):
    from benchmarks.bench_trainer import policy_with_products

    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text('{"model_type": "qwen2"}')
    (policy / "model.safetensors").write_bytes(b"weights")
    assert policy_with_products(policy, "torch", "sdpa", tmp_path) == policy
    copy = policy_with_products(policy, "openblas", "sdpa", tmp_path)
    assert copy != policy and (copy / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((copy / "config.json").read_text()) == {"model_type": "qwen2", "dara_matmul": "openblas"}
    both = policy_with_products(policy, "openblas", "openblas", tmp_path)
    assert json.loads((both / "config.json").read_text()) == {"model_type": "qwen2", "dara_matmul": "openblas",
                                                              "dara_attention": "openblas"}
    assert "dara_" not in (policy / "config.json").read_text()


def test_a_torch_side_from_a_policy_that_names_openblas_trains_a_copy_without_the_keys(tmp_path):
    """The pipeline's warm starts name OpenBLAS in their config.json: ``--matmul torch --attention sdpa`` must not
    measure OpenBLAS."""
    from benchmarks.bench_trainer import policy_with_products

    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text('{"model_type": "qwen2", "dara_matmul": "openblas", '
                                        '"dara_attention": "openblas"}')
    (policy / "model.safetensors").write_bytes(b"weights")
    copy = policy_with_products(policy, "torch", "sdpa", tmp_path)
    assert copy != policy and (copy / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((copy / "config.json").read_text()) == {"model_type": "qwen2"}
    assert '"dara_matmul": "openblas"' in (policy / "config.json").read_text()
    assert policy_with_products(policy, "openblas", "openblas", tmp_path) == policy  # already what is asked for


def test_each_side_times_the_optimiser_its_own_warm_start_builds(tmp_path, monkeypatch):
    """A revision without sft_optimizer built AdamW inline: fused from 650b268 on, unfused before, so the old side
    must not be timed with an optimiser its warm start never ran."""
    import importlib

    import torch

    from benchmarks.bench_trainer import warm_start_optimizer

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "ws_fused.py").write_text(
        "import torch\ndef warm_start(p, lr):\n    return torch.optim.AdamW(p, lr=lr, weight_decay=0.0, fused=True)\n")
    (tmp_path / "ws_unfused.py").write_text(
        "import torch\ndef warm_start(p, lr):\n    return torch.optim.AdamW(p, lr=lr, weight_decay=0.0)\n")
    parameters = [torch.nn.Parameter(torch.zeros(3))]
    assert warm_start_optimizer(importlib.import_module("ws_fused"), parameters, 1e-3).defaults["fused"] is True
    assert not warm_start_optimizer(importlib.import_module("ws_unfused"), parameters, 1e-3).defaults["fused"]
    from dara.tiny import warmstart  # this checkout names its optimiser

    assert warm_start_optimizer(warmstart, parameters, 1e-3).defaults["fused"] is True
