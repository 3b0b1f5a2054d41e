"""The paper study from experiments/paper.yaml to verl commands, checked by composing verl 0.9.1's Hydra config."""

from __future__ import annotations

import copy
import os

import pytest
import torch

torch.set_num_threads(1)

from dara.experiments import ExperimentError, load_experiment  # noqa: E402
from dara.runs import find_run, run_matrix  # noqa: E402
from dara.verl_backend.launch import LaunchError, check_verl_version, hydra_overrides, verl_overrides  # noqa: E402

paper_runs = run_matrix


def load_paper_experiment(path=None):
    experiment = load_experiment(path or "paper")
    check_verl_version(experiment["settings"]["paper"]["verl_version"])
    return experiment


@pytest.fixture(scope="module")
def experiment():
    return load_paper_experiment()


def test_the_study_has_every_run_of_the_paper(experiment):
    counts = {target: len(paper_runs(experiment, target)) for target in experiment["targets"]}
    # Table 1: 6 methods x 2 models x 5 seeds; group ablation 4 x 4 G x 3 seeds; 3 rewards 4 x 3;
    # math 6 methods x 4 models; static weights 2 methods on R1-Distill-1.5B.
    assert counts == {"toolcall": 60, "group_size": 48, "three_rewards": 12, "math": 24, "static_ablation": 2}
    runs = paper_runs(experiment)
    assert len(runs) == 60 + 48 - 12 + 12 + 24 + 2  # the group ablation's G=4 runs are Table 1's 1.5B runs
    assert len({run.run_dir for run in runs}) == len(runs)
    shared = find_run(experiment, "toolcall-qwen2.5-1.5b", "dara_sym", 4, 0)
    assert set(shared.targets) == {"toolcall", "group_size"}


def test_group_size_study_keeps_2048_responses_per_step(experiment):
    for run in paper_runs(experiment, "group_size"):
        values = verl_overrides(run, "/runs/x")
        assert values["data.train_batch_size"] * values["actor_rollout_ref.rollout.n"] == 2048
        assert values["actor_rollout_ref.actor.ppo_mini_batch_size"] * run.group_size == 512  # 4 updates per step


def test_tool_and_math_settings_follow_the_paper(experiment):
    tool = verl_overrides(find_run(experiment, "toolcall-qwen2.5-3b", "dara_asym", 4, 2), "/runs/t")
    assert tool["algorithm.adv_estimator"] == "dara_asym"
    assert tool["trainer.v1.trainer_mode"] == "dara_sync"
    assert tool["algorithm.dara.batch_norm"] == "token" and tool["algorithm.dara.w_max"] == 5.0
    assert tool["algorithm.use_kl_in_reward"] is True and tool["algorithm.kl_ctrl.kl_coef"] == 0.001
    assert tool["actor_rollout_ref.rollout.seed"] == 0 and tool["data.seed"] == 2  # vLLM seed 0, data order = seed
    assert tool["trainer.total_training_steps"] == 100 and tool["trainer.n_gpus_per_node"] == 4
    assert tool["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-3B-Instruct"
    assert "file" in tool["trainer.logger"]

    math = verl_overrides(find_run(experiment, "math_length-r1-distill-1.5b", "static_sym", 16, 0), "/runs/m")
    assert math["algorithm.adv_estimator"] == "dara_static_sym"
    assert math["algorithm.dara.static_weights"] == [1.0, 5.0]
    assert math["algorithm.dara.batch_norm"] == "response"
    assert math["data.train_batch_size"] == 512 and math["actor_rollout_ref.rollout.n"] == 16
    assert math["algorithm.filter_groups.enable"] is True and math["algorithm.filter_groups.metric"] == "reward"
    assert math["data.max_response_length"] == 8000 and math["trainer.total_training_steps"] == 200
    assert math["reward.reward_manager.name"] == "TokenCountRewardManager"
    assert math["actor_rollout_ref.rollout.seed"] == 0
    thinking = verl_overrides(find_run(experiment, "math_length-qwen3-4b-thinking", "dara_asym", 16, 0), "/r")
    assert thinking["trainer.total_training_steps"] == 100

    three = verl_overrides(find_run(experiment, "toolcall3-qwen2.5-1.5b", "gdpo", 4, 1), "/runs/3")
    assert three["algorithm.dara.reward_keys"] == ["format", "correctness", "think_length"]
    assert three["reward.custom_reward_function.reward_kwargs.with_think_length"] is True
    assert three["algorithm.adv_estimator"] == "dara_gdpo"
    assert three["algorithm.use_kl_in_reward"] is True  # inherited from the toolcall task


def test_wandb_is_added_when_a_project_is_configured(experiment):
    run = find_run(experiment, "toolcall-qwen2.5-1.5b", "grpo", 4, 0)
    run.settings["wandb_project"] = "dara"
    values = verl_overrides(run, "/r")
    assert values["trainer.logger"] == ["console", "file", "wandb"] and values["trainer.project_name"] == "dara"


def test_hydra_rendering_adds_plus_only_for_new_keys():
    rendered = hydra_overrides({"algorithm.dara.reward_keys": ["format", "correctness"], "trainer.save_freq": 10,
                                "reward.custom_reward_function.path": "pkg://dara.verl_plugin.rewards",
                                "algorithm.use_kl_in_reward": True, "data.x": None, "actor.lr": 1e-06})
    assert rendered == ["+algorithm.dara.reward_keys=['format','correctness']", "trainer.save_freq=10",
                        "reward.custom_reward_function.path='pkg://dara.verl_plugin.rewards'",
                        "algorithm.use_kl_in_reward=true", "data.x=null", "actor.lr=1e-06"]


def _write(tmp_path, experiment):
    import yaml

    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def test_bad_paper_settings_fail_with_the_key_named(experiment, tmp_path):
    broken = copy.deepcopy(experiment)
    broken["settings"]["paper"]["modles"] = {}
    with pytest.raises(ExperimentError, match="modles"):
        load_paper_experiment(_write(tmp_path, broken))
    broken = copy.deepcopy(experiment)
    broken["settings"]["paper"]["models"]["qwen2.5-3b"]["resources"]["gpus"] = 4
    with pytest.raises(ExperimentError, match=r"settings/paper/models/qwen2.5-3b/resources.*'gpus'"):
        load_paper_experiment(_write(tmp_path, broken))
    broken = copy.deepcopy(experiment)
    broken["tasks"]["math_length"]["settings"]["paper"]["rewrd_keys"] = ["a"]
    with pytest.raises(ExperimentError, match="rewrd_keys"):
        load_paper_experiment(_write(tmp_path, broken))
    broken = copy.deepcopy(experiment)
    del broken["settings"]["paper"]["target_models"]["math"]
    with pytest.raises(ExperimentError, match="target_models/math"):
        load_paper_experiment(_write(tmp_path, broken))
    broken = copy.deepcopy(experiment)
    broken["settings"]["paper"]["verl_version"] = "0.7.0"
    with pytest.raises(LaunchError, match="0.9.1"):
        load_paper_experiment(_write(tmp_path, broken))
    broken = copy.deepcopy(experiment)
    broken["targets"]["group_size"]["group_sizes"] = [4, 6]
    runs = paper_runs(load_paper_experiment(_write(tmp_path, broken)), "group_size")
    with pytest.raises(LaunchError, match="multiple of G=6"):
        [verl_overrides(run, "/r") for run in runs]
    broken = copy.deepcopy(experiment)
    broken["settings"]["paper"]["logger"] = ["console"]
    run = paper_runs(load_paper_experiment(_write(tmp_path, broken)), "toolcall")[0]
    with pytest.raises(LaunchError, match="file"):
        verl_overrides(run, "/r")


def test_every_run_composes_into_verls_config_and_passes_its_checks(experiment, tmp_path):
    """Every key exists in verl's Hydra config (or is added with +) and the values pass verl's own validation."""
    verl = pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    from dara.verl_plugin import rewards
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    shapes = {}
    for run in paper_runs(experiment):
        shapes.setdefault((run.task, run.model, run.group_size, run.method), run)
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        for run in shapes.values():
            values = verl_overrides(run, tmp_path / "run", env={"VERL_FILE_LOGGER_PATH": str(tmp_path / "a.jsonl"),
                                                                **run.settings.get("env", {})})
            cfg = compose(config_name="ppo_trainer", overrides=hydra_overrides(values))
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
            # verl resolves our reward function and (math) reward manager from these settings
            reward_fn = get_custom_reward_fn(cfg)
            assert reward_fn.args[0] is getattr(rewards, run.settings["reward_function"])
            assert reward_fn.args[1] == dict(run.settings.get("reward_kwargs", {}))
            manager = resolve_reward_manager_cls(cfg)
            assert (manager.__name__ == "TokenCountRewardManager") == (run.task == "math_length")
            for key, value in values.items():  # what verl will read is what we asked for
                node = cfg
                for part in key.split("."):
                    node = node[part]
                expected = [str(v) for v in value] if isinstance(value, list) else value
                got = [str(v) for v in node] if isinstance(value, list) else node
                assert got == expected, key


def test_train_writes_provenance_links_checkpoints_and_resumes(experiment, tmp_path, monkeypatch):
    """`train` with verl replaced by a stand-in that logs like verl's file logger and saves like its checkpointer."""
    import json
    import subprocess

    import pandas as pd
    import yaml

    from dara.verl_backend import launch

    real_run = subprocess.run
    calls = []

    def fake_verl(command, env=None, check=False, cwd=None, **kwargs):
        if "dara.verl_plugin.main" not in command:
            return real_run(command, env=env, check=check, cwd=cwd, **kwargs)
        calls.append((command, env))
        attempt = len(calls)
        run_dir = tmp_path / "results" / "paper" / "runs" / "toolcall-qwen2.5-1.5b" / "dara_asym" / "G4" / "seed1"
        with open(env["VERL_FILE_LOGGER_PATH"], "w") as log:
            for step in (range(1, 3) if attempt == 1 else range(2, 4)):
                data = {"training/global_step": step, "dara/reward/format": 0.1 * step + attempt,
                        "dara/reward/correctness": 1.0, "dara/density/format": 0.5}
                log.write(json.dumps({"step": step, "data": data}) + "\n")
        export = run_dir / "verl_checkpoints" / f"global_step_{attempt + 1}" / "actor" / "huggingface"
        export.mkdir(parents=True)
        (export / "config.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(launch.subprocess, "run", fake_verl)
    run = find_run(experiment, "toolcall-qwen2.5-1.5b", "dara_asym", 4, 1)
    out = launch.train(run, tmp_path, data_dir=tmp_path / "data")
    run_dir = out.parent
    assert out == tmp_path / "results" / "paper" / "runs" / "toolcall-qwen2.5-1.5b" / "dara_asym" / "G4" / "seed1" / "metrics.parquet"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    # not its targets: which sweeps list a run is not what it computes
    assert config["run"] == {"task": "toolcall", "model": "qwen2.5-1.5b", "method": "dara_asym", "group_size": 4,
                             "seed": 1, "warm_start": 0}
    assert config["verl_overrides"]["algorithm.adv_estimator"] == "dara_asym"
    assert (run_dir / "git_revision.txt").read_text().strip()
    command, env = calls[0]
    assert "+algorithm.dara.reward_keys=['format','correctness']" in command
    assert env["VERL_FILE_LOGGER_PATH"].endswith("verl_logs/attempt1.jsonl")
    # every verl process (also on a Ray cluster started before the run) gets the logger path, as an absolute path
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='{env['VERL_FILE_LOGGER_PATH']}'" in command
    assert config["verl_overrides"]["trainer.default_local_dir"] == str(run_dir.absolute() / "verl_checkpoints")
    assert (run_dir / "checkpoints" / "step2" / "config.json").is_file()

    launch.train(run, tmp_path, data_dir=tmp_path / "data")  # a resumed attempt
    assert calls[1][1]["VERL_FILE_LOGGER_PATH"].endswith("verl_logs/attempt2.jsonl")
    frame = pd.read_parquet(out)
    assert frame["step"].tolist() == [0, 1, 2]  # verl's steps 1-3: the policies after 0-2 updates
    assert frame["reward/format"].round(6).tolist() == [1.1, 2.2, 2.3]  # verl steps 2-3 from the second attempt
    # verl's global_step_<N> is the policy after N updates already: checkpoints keep its number
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step2", "step3"]


def test_primary_models_must_be_given_for_every_task(experiment, tmp_path):
    broken = copy.deepcopy(experiment)
    del broken["settings"]["paper"]["primary_models"]["toolcall3"]
    with pytest.raises(ExperimentError, match="primary_models/toolcall3"):
        load_paper_experiment(_write(tmp_path, broken))
    runs = paper_runs(experiment)
    assert {(r.task, r.model) for r in runs if r.primary} == {
        ("toolcall", "qwen2.5-1.5b"), ("toolcall3", "qwen2.5-1.5b"), ("math_length", "r1-distill-1.5b")}
