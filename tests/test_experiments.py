"""Experiment files: schema validation that names the bad key, the run matrix, settings resolution."""

import copy

import pytest

from dara.experiments import ExperimentError, load_experiment, run_matrix, run_spec, validate_experiment, \
    warm_start_settings
from dara.tiny.trainer import TrainArgs

TINY_TARGETS = {"toolcall", "math_length", "act_critic", "group_size", "three_rewards", "static_vs_dynamic"}


@pytest.fixture(scope="module")
def tiny():
    return load_experiment("tiny")


@pytest.mark.parametrize("scale", ["tiny", "smoke"])
def test_shipped_experiments_validate_and_every_run_builds_trainer_args(scale):
    experiment = load_experiment(scale)
    assert experiment["scale"] == scale and set(experiment["targets"]) == TINY_TARGETS
    for run in run_matrix(experiment):
        TrainArgs(task=run["task"], method=run["method"], group_size=run["group_size"], seed=run["seed"],
                  policy="p", out="o", **run["settings"])


def test_tiny_run_matrix_sizes(tiny):
    sizes = {name: len(run_matrix(tiny, name)) for name in TINY_TARGETS}
    assert sizes == {"toolcall": 24, "math_length": 24, "act_critic": 15, "group_size": 36, "three_rewards": 12,
                     "static_vs_dynamic": 12}
    runs = run_matrix(tiny)
    # group_size shares its G=8 runs with toolcall; static_vs_dynamic is inside math_length.
    assert len(runs) == 24 + 24 + 15 + 27 + 12
    assert len({(r["task"], r["method"], r["group_size"], r["seed"]) for r in runs}) == len(runs)
    shared = run_spec(tiny, "toolcall", "dara_sym", 8, 0)
    assert sorted(shared["targets"]) == ["group_size", "toolcall"]
    assert all(len(r["seeds"]) >= 3 for r in tiny["targets"].values())


def test_group_size_sweep_keeps_responses_per_step(tiny):
    runs = run_matrix(tiny, "group_size")
    assert {r["group_size"] for r in runs} == {4, 8, 16, 32}
    assert len({r["settings"]["responses_per_step"] for r in runs}) == 1


def test_settings_resolve_global_then_task_then_target(tiny):
    experiment = copy.deepcopy(tiny)
    experiment["targets"]["act_critic"]["settings"] = {"learning_rate": 0.5}
    experiment["tasks"]["act_critic"]["settings"]["learning_rate"] = 0.25
    experiment["tasks"]["act_critic"]["settings"]["batch_norm"] = "none"
    spec = run_spec(experiment, "act_critic", "gdpo", 8, 0)
    assert spec["settings"]["learning_rate"] == 0.5
    assert spec["settings"]["batch_norm"] == "none"
    assert spec["settings"]["steps"] == experiment["settings"]["steps"]
    assert spec["settings"]["task_options"] == experiment["tasks"]["act_critic"]["options"]


def test_static_weights_reach_only_static_methods(tiny):
    assert "static_weights" in run_spec(tiny, "math_length", "static_asym", 8, 0)["settings"]
    assert "static_weights" not in run_spec(tiny, "math_length", "dara_asym", 8, 0)["settings"]


@pytest.mark.parametrize("path, value, key", [
    (("settings",), {"learning_rat": 0.1}, "learning_rat"),
    (("targets", "toolcall"), {"methds": ["grpo"]}, "methds"),
    (("warm_start", "model"), {"hidden": 3}, "hidden"),
    (("tasks", "toolcall"), {"option": {}}, "option"),
])
def test_a_typo_fails_naming_the_key(tiny, path, value, key):
    experiment = copy.deepcopy(tiny)
    block = experiment
    for part in path:
        block = block[part]
    block.update(value)
    with pytest.raises(ExperimentError, match=key):
        validate_experiment(experiment)


def test_an_unknown_method_fails_naming_it_and_where(tiny):
    experiment = copy.deepcopy(tiny)
    experiment["targets"]["toolcall"]["methods"].append("dara_symm")
    with pytest.raises(ExperimentError, match=r"targets/toolcall/methods/8: 'dara_symm'"):
        validate_experiment(experiment)


def test_unknown_task_and_target_task_fail(tiny):
    experiment = copy.deepcopy(tiny)
    experiment["tasks"]["toolcal"] = {}
    with pytest.raises(ExperimentError, match="tasks/toolcal: unknown task"):
        validate_experiment(experiment)
    experiment = copy.deepcopy(tiny)
    experiment["targets"]["toolcall"]["task"] = "math"
    with pytest.raises(ExperimentError, match="targets/toolcall/task"):
        validate_experiment(experiment)


def test_static_method_without_or_with_wrong_weights_fails(tiny):
    experiment = copy.deepcopy(tiny)
    del experiment["tasks"]["math_length"]["settings"]["static_weights"]
    with pytest.raises(ExperimentError, match="static_weights"):
        run_matrix(experiment, "static_vs_dynamic")
    experiment["tasks"]["math_length"]["settings"]["static_weights"] = [1.0, 2.0, 5.0]
    with pytest.raises(ExperimentError, match="3 values but task 'math_length' has 2 rewards"):
        run_matrix(experiment, "static_vs_dynamic")


def test_a_run_shared_by_targets_with_different_settings_fails(tiny):
    experiment = copy.deepcopy(tiny)
    experiment["targets"]["group_size"]["settings"] = {"learning_rate": 0.5}
    with pytest.raises(ExperimentError, match="different settings"):
        run_matrix(experiment)


def test_unknown_target_scale_and_run_fail(tiny, tmp_path):
    with pytest.raises(ExperimentError, match="unknown target"):
        run_matrix(tiny, "toolcalls")
    with pytest.raises(FileNotFoundError):
        load_experiment("huge")
    with pytest.raises(ExperimentError, match="defines run"):
        run_spec(tiny, "toolcall", "grpo", 8, 99)
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    with pytest.raises(ExperimentError, match="mapping"):
        load_experiment(bad)


def test_warm_start_settings_merge_task_overrides(tiny):
    settings = warm_start_settings(tiny, "math_length")
    assert settings["task_name"] == "math_length"
    assert settings["corpus_items"] == tiny["tasks"]["math_length"]["warm_start"]["corpus_items"]
    assert settings["sft_steps"] == tiny["tasks"]["math_length"]["warm_start"]["sft_steps"]
    assert settings["sft_batch_size"] == tiny["warm_start"]["sft_batch_size"]
    assert settings["max_new_tokens"] == tiny["tasks"]["math_length"]["settings"]["max_new_tokens"]
