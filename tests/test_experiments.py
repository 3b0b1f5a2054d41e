"""Experiment files: schema validation that names the bad key, the run matrix, settings resolution."""

import copy
import dataclasses
import json

import pytest
import torch
import yaml

from dara.experiments import EXPERIMENTS_DIR, ExperimentError, default_settings, load_experiment, \
    validate_experiment, warm_start_settings
from dara.runs import Run, find_run, policy_dir, run_matrix
from dara.tiny.trainer import TrainSettings, resolved_config

SMOKE_TARGETS = {"toolcall", "math_length", "act_critic", "group_size", "three_rewards", "static_vs_dynamic", "trl",
                 "denser_regime"}
TINY_TARGETS = SMOKE_TARGETS | {"toolcall_baselines", "math_baselines", "group_size_asym", "group_size_grpo",
                                "toolcall_control", "math_control", "three_rewards_control", "act_critic_control"}


@pytest.fixture(scope="module")
def tiny():
    return load_experiment("tiny")


@pytest.mark.parametrize("scale", ["tiny", "smoke"])
def test_shipped_experiments_validate_and_every_run_has_a_cpu_trainers_settings(scale):
    experiment = load_experiment(scale)
    assert experiment["scale"] == scale
    assert set(experiment["targets"]) == {"tiny": TINY_TARGETS, "smoke": SMOKE_TARGETS}[scale]
    for run in run_matrix(experiment):
        config = resolved_config(run, TrainSettings.of(run))
        assert set(config) == {"task", "method", "group_size", "seed", "warm_start", "static_weights",
                               *run.settings} - {"wandb", "wandb_project"}
        assert config["warm_start"] == run.warm_start
        assert run.policy_dir == policy_dir(scale, run.task, warm_start=run.warm_start)
        assert run.run_dir.startswith(f"results/{scale}/")


def test_tiny_run_matrix_sizes(tiny):
    sizes = {name: len(run_matrix(tiny, name)) for name in TINY_TARGETS}
    assert sizes == {"toolcall": 40, "toolcall_baselines": 15, "math_length": 40, "math_baselines": 15,
                     "act_critic": 18, "group_size": 60, "group_size_asym": 9, "group_size_grpo": 9,
                     "three_rewards": 15, "static_vs_dynamic": 12, "trl": 30, "toolcall_control": 10, "math_control": 10,
                     "three_rewards_control": 10, "act_critic_control": 10, "denser_regime": 30}
    runs = run_matrix(tiny)
    # group_size shares its G=4 runs with toolcall (and group_size_asym and group_size_grpo with toolcall's DARA-Asym
    # and GRPO); static_vs_dynamic is
    # inside math_length and math_baselines; denser_regime's 30 runs are its own task's; the trl runs have the same coordinates as toolcall's but another
    # backend and folder; each task's 10-seed drift control shares its seeds 0-2 with the baselines' control.
    assert len(runs) == 40 + 15 + 40 + 15 + 18 + (60 - 20) + (9 - 3) + (9 - 3) + 15 + 30 + 4 * (10 - 3) + 30
    assert len({r.run_dir for r in runs}) == len(runs)
    shared = find_run(tiny, "toolcall", "dara_sym", 4, 0, backend="tiny")
    assert sorted(shared.targets) == ["group_size", "toolcall"]
    assert find_run(tiny, "toolcall", "dara_sym", 4, 0, backend="trl").run_dir.startswith("results/tiny/trl/runs/")
    # every claim's arms have 10 seeds (the headline, the sweep, the math methods compared); other targets 3
    assert all(len(tiny["targets"][name]["seeds"]) >= 10 for name in ("toolcall", "group_size", "math_length"))
    # each task has its drift control
    controlled = {tiny["targets"][name]["task"] for name in tiny["targets"]
                  if "shuffled" in tiny["targets"][name]["methods"]}
    assert controlled == set(tiny["tasks"])
    # ... on 10 seeds: its drift is a criterion of the regime (docs/tiny_scale.md), decided on as many seeds as a claim
    control_seeds = {task: set() for task in tiny["tasks"]}
    for run in runs:
        if run.method == "shuffled" and run.backend == "tiny":
            control_seeds[run.task].add(run.seed)
    assert all(len(seeds) >= 10 for seeds in control_seeds.values()), control_seeds
    assert all(len(r["seeds"]) >= 3 for r in tiny["targets"].values())


def test_group_size_sweep_keeps_responses_per_step(tiny):
    runs = run_matrix(tiny, "group_size")
    assert {r.group_size for r in runs} == {4, 8, 16}
    assert len({r.settings["responses_per_step"] for r in runs}) == 1


def test_settings_resolve_global_then_task_then_target(tiny):
    experiment = copy.deepcopy(tiny)
    experiment["targets"]["act_critic"]["settings"] = {"learning_rate": 0.5}
    del experiment["targets"]["act_critic_control"]  # shares act_critic's control runs, so would conflict
    experiment["tasks"]["act_critic"]["settings"]["learning_rate"] = 0.25
    experiment["tasks"]["act_critic"]["settings"]["batch_norm"] = "none"
    settings = find_run(experiment, "act_critic", "gdpo", 8, 0).settings
    assert settings["learning_rate"] == 0.5
    assert settings["batch_norm"] == "none"
    assert settings["steps"] == experiment["settings"]["steps"]
    assert settings["task_options"] == experiment["tasks"]["act_critic"]["options"]


def test_static_weights_reach_only_static_methods(tiny):
    assert "static_weights" in find_run(tiny, "math_length", "static_asym", 8, 0).settings
    assert "static_weights" not in find_run(tiny, "math_length", "dara_asym", 8, 0).settings


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
    with pytest.raises(ExperimentError, match=r"targets/toolcall/methods/4: 'dara_symm'"):
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
        find_run(tiny, "toolcall", "grpo", 8, 99)
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
    # the warm start's probe generates as long as the task's runs: the global setting, or the task's own
    assert settings["max_new_tokens"] == tiny["settings"]["max_new_tokens"]
    assert warm_start_settings(tiny, "act_critic")["max_new_tokens"] == \
        tiny["tasks"]["act_critic"]["settings"]["max_new_tokens"] != tiny["settings"]["max_new_tokens"]


def test_defaults_come_from_the_schema_and_fill_what_a_file_leaves_out(tmp_path):
    minimal = {"scale": "mini", "settings": {"steps": 3},
               "tasks": {"toolcall": {"settings": {"static_weights": [5.0, 1.0]}}},
               "targets": {"t": {"task": "toolcall", "methods": ["dara_sym", "static_sym"], "group_sizes": [4],
                                 "seeds": [0]}}}
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump(minimal))
    experiment = load_experiment(path)
    defaults = default_settings()
    assert experiment["settings"] == {**defaults, "steps": 3}
    assert set(experiment["evaluation"]) == {"heldout_items", "samples", "final_samples", "warm_start_samples",
                                             "temperature", "top_p", "seed"}
    # eval_every was missing from the file: it comes from the schema instead of failing later (KeyError before)
    (run, static) = run_matrix(experiment)
    assert run.settings["eval_every"] == defaults["eval_every"] and run.checkpoint_steps == [0, 3]
    assert static.settings["static_weights"] == [5.0, 1.0] and "static_weights" not in run.settings
    assert warm_start_settings(experiment, "toolcall")["model"]["hidden_size"] > 0
    # every trainer setting has a schema default except the static weights (no sensible default exists) and the
    # schedule, unset where constant (so runs made before it existed keep their settings)
    assert set(TrainSettings.__dataclass_fields__) - set(defaults) == {"task_options", "static_weights", "lr_schedule"}


def test_the_dara_algorithm_constants_match_the_schema_defaults():
    from dara.advantages import W_MAX

    assert default_settings()["w_max"] == W_MAX


def test_scale_names_are_read_from_DARA_EXPERIMENTS_DIR_when_set(tmp_path, monkeypatch):
    from dara.experiments import experiments_dir

    smoke = yaml.safe_load((EXPERIMENTS_DIR / "smoke.yaml").read_text())
    (tmp_path / "smoke.yaml").write_text(yaml.safe_dump({**smoke, "settings": {**smoke["settings"], "steps": 7}}))
    monkeypatch.setenv("DARA_EXPERIMENTS_DIR", str(tmp_path))
    assert experiments_dir() == tmp_path and load_experiment("smoke")["settings"]["steps"] == 7
    with pytest.raises(FileNotFoundError, match="no experiment file"):
        load_experiment("tiny")  # not in the copy
    monkeypatch.setenv("DARA_EXPERIMENTS_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="pass the path of an experiment yaml"):
        load_experiment("smoke")
    monkeypatch.delenv("DARA_EXPERIMENTS_DIR")
    assert load_experiment("smoke")["settings"]["steps"] == smoke["settings"]["steps"]


def test_a_gpu_model_the_slurm_executor_refuses_fails_naming_it():
    experiment = copy.deepcopy(load_experiment("paper"))
    experiment["settings"]["paper"]["models"]["qwen2.5-1.5b"]["resources"]["gpu_model"] = "a100-40gb"
    with pytest.raises(ExperimentError, match=r"qwen2.5-1.5b/resources/gpu_model: 'a100-40gb'"):
        validate_experiment(experiment)


def _verl_cpu_toolcall(experiment):
    return next(run for run in run_matrix(experiment) if run.backend == "verl" and run.task == "toolcall")


def test_a_verl_run_takes_the_stated_cpu_trainer_settings_in_verls_keys():
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["tasks"]["toolcall"]["settings"]["max_new_tokens"] = 40     # a task-level statement reaches verl
    experiment["settings"].update(minibatches=4, kl_coef=0.0)
    run = _verl_cpu_toolcall(experiment)
    assert run.settings["verl"]["data.max_response_length"] == 40
    assert run.settings["mini_batch_responses"] == 16 // 4
    assert run.settings["verl"]["actor_rollout_ref.actor.use_kl_loss"] is False
    # the paper study states none of them: its runs carry verl's keys only
    paper_run = next(run for run in run_matrix(load_experiment("paper")) if run.task == "toolcall")
    assert "learning_rate" not in paper_run.settings and "kl_coef" not in paper_run.settings


def test_a_cosine_schedule_reaches_verl_and_its_tiny_twin():
    """verl's optimiser config names the same two schedules (constant, cosine, half a cycle to a minimum ratio of 0
    by default): stated once in the shared settings, each trainer reads it; unset, neither run carries it."""
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    assert "lr_scheduler_type" not in str(_verl_cpu_toolcall(experiment).settings)
    unset = {(r.backend, r.task, r.method, r.seed): r.settings for r in run_matrix(experiment)}
    experiment["settings"]["lr_schedule"] = "constant"  # stated at what unset means (verl's default too): no run moves
    assert {(r.backend, r.task, r.method, r.seed): r.settings for r in run_matrix(experiment)} == unset
    experiment["settings"]["lr_schedule"] = "cosine"
    run = _verl_cpu_toolcall(experiment)
    assert run.settings["verl"]["actor_rollout_ref.actor.optim.lr_scheduler_type"] == "cosine"
    twin = next(r for r in run_matrix(experiment) if r.backend == "tiny" and r.task == "toolcall")
    args = TrainSettings.of(twin)
    assert args.lr_schedule == "cosine" and args.minibatches == 1


def test_every_verl_key_a_shared_setting_becomes_is_in_verls_config():
    """The translation's targets are keys of verl's own PPO trainer config (the file its Hydra entry point
    composes), so a misspelt key fails here rather than in a verl run."""
    import importlib.util
    from pathlib import Path

    from dara.experiments import VERL_EQUIVALENT_KEYS, VERL_KL_KEYS

    verl_dir = Path(importlib.util.find_spec("verl").origin).parent
    config = yaml.safe_load((verl_dir / "trainer" / "config" / "_generated_ppo_trainer.yaml").read_text())
    keys = [key.removeprefix("verl/") for key in (*VERL_EQUIVALENT_KEYS.values(), *VERL_KL_KEYS)
            if key.startswith("verl/")]
    assert "actor_rollout_ref.actor.optim.lr_scheduler_type" in keys

    def in_config(key: str) -> bool:
        node = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    assert not in_config("actor_rollout_ref.actor.optim.lr_schedule")  # the check can fail: our name, not verl's
    assert [key for key in keys if not in_config(key)] == []


@pytest.mark.parametrize("warm_up", [0, 3])
def test_verls_cosine_schedule_gives_each_step_the_tiny_trainers_rate(warm_up, tmp_path):
    """verl steps its scheduler once per rollout step (one update a step, as the rule above requires); built as its
    FSDP engine builds it (`_build_lr_scheduler`) from the launcher's config values and verl's optimiser defaults."""
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup
    from verl.workers.config import FSDPOptimizerConfig

    from dara.tiny.trainer import learning_rate
    from dara.verl_backend.launch import verl_overrides

    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["settings"].update(lr_schedule="cosine", lr_warmup_updates=warm_up)
    runs = run_matrix(experiment)
    verl_run = next(r for r in runs if r.backend == "verl" and r.task == "toolcall")
    twin = next(r for r in runs if r.backend == "tiny" and r.task == "toolcall")
    args = TrainSettings.of(twin)
    values = verl_overrides(verl_run, tmp_path / "run", data_dir=tmp_path / "data")
    optim = FSDPOptimizerConfig(lr=values["actor_rollout_ref.actor.optim.lr"],
                                lr_warmup_steps=values["actor_rollout_ref.actor.optim.lr_warmup_steps"],
                                lr_scheduler_type=values["actor_rollout_ref.actor.optim.lr_scheduler_type"],
                                total_training_steps=values["trainer.total_training_steps"])
    assert optim.lr_scheduler_type == "cosine" and optim.total_training_steps == args.steps
    # the engine: a warm-up of 0 steps or fewer is read from the (default 0) ratio instead
    steps_of_warm_up = (optim.lr_warmup_steps if optim.lr_warmup_steps > 0
                        else int(optim.lr_warmup_steps_ratio * optim.total_training_steps))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=optim.lr)
    schedule = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=steps_of_warm_up,
                                               num_training_steps=optim.total_training_steps,
                                               min_lr_ratio=optim.min_lr_ratio, num_cycles=optim.num_cycles,
                                               zero_indexed_step=optim.zero_indexed_step)
    verl_rates = []
    for _ in range(args.steps):
        verl_rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    ours = [learning_rate(step, args) for step in range(args.steps)]
    # verl writes the cosine as 0.5 cos + 0.5, transformers (and the tiny trainer) as 0.5 (1 + cos): equal to rounding
    assert ours == pytest.approx(verl_rates, rel=1e-12, abs=1e-18)
    assert ours[-1] < ours[warm_up] == args.learning_rate


@pytest.mark.parametrize("verl_key, shared", [("actor_rollout_ref.actor.optim.lr", "learning_rate"),
                                              ("actor_rollout_ref.actor.kl_loss_type", "kl_coef"),
                                              ("trainer.save_freq", "eval_every")])
def test_a_fact_stated_in_both_vocabularies_fails_naming_both(verl_key, shared):
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["settings"]["paper"]["verl"][verl_key] = 1
    with pytest.raises(ExperimentError, match=rf"settings\.{shared} is also stated as verl key '{verl_key}'"):
        run_matrix(experiment)


def test_a_paper_setting_restated_or_a_shared_one_verl_cannot_follow_fails():
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["tasks"]["toolcall"]["settings"]["paper"]["steps"] = 20
    with pytest.raises(ExperimentError, match=r"settings\.steps is also stated as paper setting 'steps'"):
        run_matrix(experiment)
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["settings"]["minibatches"] = 3
    with pytest.raises(ExperimentError, match=r"minibatches=3 must divide responses_per_step \(16\)"):
        run_matrix(experiment)
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["settings"].update(minibatches=2, lr_warmup_updates=4)
    with pytest.raises(ExperimentError, match=r"lr_warmup_updates=4 counts updates"):
        run_matrix(experiment)
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["settings"].update(minibatches=2, lr_schedule="cosine")
    with pytest.raises(ExperimentError, match=r"lr_schedule=cosine decays over updates, verl's over steps"):
        run_matrix(experiment)
    experiment = copy.deepcopy(load_experiment("verl_cpu"))
    experiment["settings"]["lr_schedule"] = "linear"  # neither trainer has it
    with pytest.raises(ExperimentError, match=r"settings/lr_schedule"):
        validate_experiment(experiment)


@pytest.mark.parametrize("scale", ["tiny", "smoke", "verl_cpu", "paper"])
def test_every_run_survives_its_serialisation_whole(scale):
    """What a job receives (`Run.to_json`) is the run the workflow resolved: fields, settings and folders."""
    from dara.runs import Run

    for run in run_matrix(load_experiment(scale)):
        again = Run.from_json(run.to_json())
        assert again == run and again.settings == run.settings and again.scale_backend == run.scale_backend
        assert (again.run_dir, again.eval_files, again.metrics) == (run.run_dir, run.eval_files, run.metrics)
        assert again.to_json() == run.to_json()
    # which sweeps list a run is not part of what its job receives: adding a target that shares it reruns nothing
    experiment = copy.deepcopy(load_experiment(scale))
    name, block = next(iter(experiment["targets"].items()))
    experiment["targets"]["another"] = copy.deepcopy(block)
    if experiment["backend"] == "verl" and name in experiment["settings"]["paper"]["target_models"]:
        experiment["settings"]["paper"]["target_models"]["another"] = experiment["settings"]["paper"]["target_models"][name]
    before = {run.run_dir: run.to_json() for run in run_matrix(load_experiment(scale))}
    assert {run.run_dir: run.to_json() for run in run_matrix(experiment)} == before


def test_a_malformed_serialised_run_fails_naming_the_problem():
    import json

    from dara.runs import Run

    text = run_matrix(load_experiment("smoke"))[0].to_json()
    with pytest.raises(ValueError, match="must be a JSON object"):
        Run.from_json("results/smoke/runs/toolcall/grpo/G4/seed0")
    with pytest.raises(ValueError, match=r"unknown fields \['colour'\], missing fields \['seed'\]"):
        data = json.loads(text)
        del data["seed"]
        Run.from_json(json.dumps({**data, "colour": "red"}))


def test_a_run_outside_the_workflows_tree_keeps_its_results_folder(tmp_path):
    """A run in another results tree (a pilot's, a test's) places every folder there and survives serialisation;
    a workflow run's JSON does not name the tree, so its job's params are those of every run in it."""
    from dara.runs import RESULTS, Run, WarmStart

    run = find_run(load_experiment("smoke"), "toolcall", "grpo", 4, 0)
    assert run.results == RESULTS and "results" not in json.loads(run.to_json())
    elsewhere = dataclasses.replace(run, results=str(tmp_path / "pilot"))
    assert elsewhere.run_dir == f"{tmp_path}/pilot/smoke/runs/toolcall/grpo/G4/seed0"
    assert elsewhere.eval_file(0) == f"{tmp_path}/pilot/smoke/eval/toolcall/grpo/G4/seed0/step0.json"
    assert elsewhere.policy_dir == f"{tmp_path}/pilot/smoke/policies/toolcall/warm_start0"
    again = Run.from_json(elsewhere.to_json())
    assert again == elsewhere and again.run_dir == elsewhere.run_dir and again != run
    warm = WarmStart.of(load_experiment("smoke"), "toolcall", results=str(tmp_path), warm_start=1)
    assert warm.checkpoint_dir(0) == f"{tmp_path}/smoke/policies/toolcall/warm_start1"
    assert warm.checkpoint_steps == (0,) and warm.warm_start == 1
    assert warm.eval_file(0) == f"{tmp_path}/smoke/policies/toolcall/warm_start1/heldout_eval/step0.json"
    with pytest.raises(ValueError, match="one checkpoint, step 0"):
        warm.checkpoint_dir(2)


def test_a_run_folder_typed_by_hand_places_the_runs_results_tree(tmp_path):
    from dara.runs import find_run_by_dir

    smoke = load_experiment("smoke")
    run = find_run(smoke, "toolcall", "grpo", 4, 0)
    assert find_run_by_dir(smoke, run.run_dir).results == "results"
    typed = find_run_by_dir(smoke, f"{tmp_path}/{run.run_dir}/")
    assert typed.results == f"{tmp_path}/results" and typed.run_dir == f"{tmp_path}/{run.run_dir}"
    with pytest.raises(ExperimentError, match="is not the folder of run"):  # the scale's own backend named
        find_run_by_dir(smoke, f"{tmp_path}/results/smoke/tiny/runs/toolcall/grpo/G4/seed0")


def test_seeds_go_round_their_tasks_warm_starts_and_each_warm_start_has_its_own_seed(tiny):
    """Seed s trains from warm start warm_starts[s % len] (the task's list unless the target gives one); every arm of
    a claim shares the same warm starts, and warm start k is drawn with the warm_start seed + k."""
    from dara.runs import warm_start_index

    headline = run_matrix(tiny, "toolcall")
    assert {(run.seed, run.warm_start) for run in headline} == {(s, s % 5) for s in range(10)}
    for method in ("gdpo", "dara_sym"):
        arm = sorted((run.seed, run.warm_start) for run in headline if run.method == method)
        assert [w for _, w in arm] == [0, 1, 2, 3, 4] * 2
    base = tiny["warm_start"].get("seed", 0)
    assert [warm_start_settings(tiny, "toolcall", k)["seed"] for k in range(3)] == [base, base + 1, base + 2]
    assert warm_start_index([5, 6, 7, 8, 9], 12) == 7
    with pytest.raises(ValueError, match="at least one"):
        warm_start_index([], 0)
    with pytest.raises(ExperimentError, match="integer >= 0"):
        warm_start_settings(tiny, "toolcall", -1)
    # a run reaches its job with its warm start, and a changed warm start changes the job's params (a rerun)
    run = headline[0]
    assert Run.from_json(run.to_json()).warm_start == run.warm_start
    assert dataclasses.replace(run, warm_start=run.warm_start + 1).to_json() != run.to_json()


def test_a_run_two_targets_give_different_warm_starts_is_refused(tiny):
    experiment = copy.deepcopy(tiny)
    experiment["targets"]["toolcall_baselines"]["methods"].append("gdpo")  # gdpo G4 seeds 0-2, also in toolcall
    experiment["targets"]["toolcall_baselines"]["warm_starts"] = [7]
    with pytest.raises(ExperimentError, match="warm starts 0 and 7"):
        run_matrix(experiment)


def test_a_replicate_file_draws_every_run_and_warm_start_again(tmp_path):
    """experiments/tiny_replicate.yaml is tiny.yaml with every seed and warm start shifted by 100: the same runs and
    pairing (each seed keeps its place in its warm-start round), none of the study's policies or draws."""
    study, replicate = run_matrix(load_experiment("tiny")), run_matrix(load_experiment("tiny_replicate"))
    assert len(replicate) == len(study) and {run.scale for run in replicate} == {"tiny_replicate"}
    shifted = {(run.task, run.method, run.group_size, run.seed - 100, run.warm_start - 100) for run in replicate}
    assert shifted == {(run.task, run.method, run.group_size, run.seed, run.warm_start) for run in study}
    assert all(run.policy_dir.startswith("results/tiny_replicate/policies/") for run in replicate if run.policy_dir)

    def stub(**changes):
        path = tmp_path / "stub.yaml"
        fields = {"scale": "mine", "replicate_of": "tiny", "replicate": 1, **changes}
        path.write_text(yaml.safe_dump({k: v for k, v in fields.items() if v is not None}))
        (tmp_path / "tiny.yaml").write_text((EXPERIMENTS_DIR / "tiny.yaml").read_text())
        return path

    with pytest.raises(ExperimentError, match="names only"):
        load_experiment(stub(settings={"steps": 3}))
    with pytest.raises(ExperimentError, match="replicate must be an integer >= 1"):
        load_experiment(stub(replicate=0))
    with pytest.raises(ExperimentError, match="a scale name of its own"):
        load_experiment(stub(scale="tiny"))
    study_text = (EXPERIMENTS_DIR / "tiny.yaml").read_text().replace("warm_starts: [0, 1, 2, 3, 4]   #",
                                                                     "warm_starts: [0, 1, 2]   #")
    path = stub()
    (tmp_path / "tiny.yaml").write_text(study_text)
    with pytest.raises(ExperimentError, match="lengths \\[3, 5, 5\\]"):
        load_experiment(path)


def test_a_verl_target_names_no_warm_starts_and_verl_runs_twins_start_from_warm_start_0():
    experiment = copy.deepcopy(yaml.safe_load((EXPERIMENTS_DIR / "verl_cpu.yaml").read_text()))
    verl_target = next(name for name, target in experiment["targets"].items()
                       if target.get("backend", experiment["backend"]) == "verl")
    experiment["targets"][verl_target]["warm_starts"] = [0, 1]
    with pytest.raises(ExperimentError, match=f"targets/{verl_target}/warm_starts: a verl target"):
        validate_experiment(copy.deepcopy(experiment))
    del experiment["targets"][verl_target]["warm_starts"]
    experiment["tasks"][next(iter(experiment["tasks"]))]["warm_starts"] = [0, 1]
    with pytest.raises(ExperimentError, match="start from warm start 0"):
        validate_experiment(experiment)
