"""The pieces of the verl CPU scale that run without starting verl: launcher settings for ``device: cpu``, Hydra
rendering, tiny tasks as verl data and reward, and the verl path's estimator settings (epsilons, singletons)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from dara.verl_plugin.cpu import BACKEND_MODULE, CPU_OVERRIDES, GPU_HF_OVERRIDES, worker_environment
from dara.verl_plugin.estimators import DaraSettings, dara_advantages
from dara.experiments import ExperimentError, load_experiment
from dara.runs import run_matrix as paper_runs
from dara.verl_backend.launch import LaunchError, hydra_overrides, verl_overrides

load_paper_experiment = load_experiment

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def experiment():
    return load_paper_experiment(ROOT / "experiments" / "verl_cpu.yaml")


def _write(tmp_path, experiment):
    path = tmp_path / "verl_cpu.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def test_cpu_runs_get_the_backend_settings_and_environment(experiment, tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # verl starts its own Ray (joining one: the next test)
    runs = paper_runs(experiment)
    assert {(r.task, r.method) for r in runs} == {(t, m) for t in ("toolcall", "math_length")
                                                  for m in ("grpo", "gdpo", "dara_sym", "dara_asym")}
    values = verl_overrides(runs[0], tmp_path / "run", env={"VERL_FILE_LOGGER_PATH": "/x/a.jsonl"})
    for key, value in CPU_OVERRIDES.items():
        assert values[key] == value, key
    env = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("ray_kwargs.ray_init.runtime_env.env_vars.")}
    assert env["VERL_USE_EXTERNAL_MODULES"] == BACKEND_MODULE and env["VERL_PLATFORM"] == "cpu"
    assert env["OMP_NUM_THREADS"] == "1" and env["VERL_FILE_LOGGER_PATH"] == "/x/a.jsonl"
    # Ray workers import the dara that runs this test (a worktree's src wins over another installed copy)
    import dara

    assert env["PYTHONPATH"].split(":")[0] == str(Path(dara.__file__).resolve().parents[1])
    rendered = hydra_overrides(values)
    assert "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS='1'" in rendered  # a string, not the int 1
    assert "+ray_kwargs.ray_init.num_gpus=1" in rendered
    assert "+actor_rollout_ref.model.override_config.attn_implementation='eager'" in rendered
    assert "trainer.device='cpu'" in rendered


def test_a_cpu_run_joining_a_ray_cluster_leaves_the_resource_counts_to_its_nodes(experiment, tmp_path, monkeypatch):
    # profiles/slurm/ray_job.sh exports RAY_ADDRESS; ray.init(address=...) refuses num_cpus and num_gpus
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    rendered = hydra_overrides(verl_overrides(paper_runs(experiment)[0], tmp_path / "run"))
    assert "ray_kwargs.ray_init.num_cpus=null" in rendered
    assert not any("ray_init.num_gpus" in override for override in rendered)
    assert "trainer.device='cpu'" in rendered


def test_every_string_is_quoted_for_hydra():
    assert hydra_overrides({"a.b": "1", "a.c": "true", "a.d": 1, "a.e": ["x", "it's"], "a.f": None}) == [
        "a.b='1'", "a.c='true'", "a.d=1", "a.e=['x','it\\'s']", "a.f=null"]
    assert hydra_overrides({"a.m": {"param_dtype": "fp32", "n": 1}}) == ["a.m={param_dtype:'fp32',n:1}"]
    with pytest.raises(LaunchError, match="cannot render"):
        hydra_overrides({"a.b": {1, 2}})


def test_unknown_or_conflicting_cpu_settings_raise_before_anything_starts(experiment, tmp_path):
    broken = copy.deepcopy(experiment)
    broken["settings"]["paper"]["device"] = "tpu"
    with pytest.raises(ExperimentError, match="settings/paper/device: 'tpu'"):
        load_paper_experiment(_write(tmp_path, broken))
    broken = copy.deepcopy(experiment)
    broken["tasks"]["toolcall"]["settings"]["paper"]["verl"]["actor_rollout_ref.rollout.name"] = "vllm"
    run = [r for r in paper_runs(load_paper_experiment(_write(tmp_path, broken))) if r.task == "toolcall"][0]
    with pytest.raises(LaunchError, match="rollout.name"):
        verl_overrides(run, tmp_path)
    broken = copy.deepcopy(experiment)
    broken["settings"]["paper"]["models"]["tiny_tool"]["resources"]["gpus_per_node"] = 4
    run = [r for r in paper_runs(load_paper_experiment(_write(tmp_path, broken))) if r.task == "toolcall"][0]
    with pytest.raises(LaunchError, match="world size 1"):
        verl_overrides(run, tmp_path)


def test_worker_environment_keeps_other_modules_and_strings_only():
    env = worker_environment({"VERL_USE_EXTERNAL_MODULES": "mine", "OMP_NUM_THREADS": 2, "PYTHONPATH": "/a"})
    assert env["VERL_USE_EXTERNAL_MODULES"] == f"mine,{BACKEND_MODULE}"
    assert env["OMP_NUM_THREADS"] == "2" and env["PYTHONPATH"].endswith(":/a")
    assert all(isinstance(v, str) for v in env.values())


def test_the_gpu_hf_overrides_are_the_cpu_ones_less_the_cpu_platforms_with_their_own_device_and_attention():
    # GPU_HF_OVERRIDES is derived from CPU_OVERRIDES; these are its contents (and order) as written out by hand before
    assert list(GPU_HF_OVERRIDES.items()) == [
        ("trainer.device", "cuda"),
        ("trainer.nnodes", 1),
        ("trainer.n_gpus_per_node", 1),
        ("ray_kwargs.ray_init.num_cpus", 16),
        ("actor_rollout_ref.actor.strategy", "fsdp2"),
        ("actor_rollout_ref.ref.strategy", "fsdp2"),
        ("actor_rollout_ref.rollout.name", "hf"),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", 1),
        ("actor_rollout_ref.rollout.calculate_log_probs", True),
        ("actor_rollout_ref.rollout.agent.num_workers", 1),
        ("actor_rollout_ref.model.override_config.attn_implementation", "sdpa"),
        ("reward.num_workers", 1),
        ("data.dataloader_num_workers", 0),
        ("transfer_queue.backend.SimpleStorage.num_data_storage_units", 1),
    ]
    differing = {"trainer.device", "actor_rollout_ref.model.override_config.attn_implementation"}
    assert {key for key in GPU_HF_OVERRIDES if GPU_HF_OVERRIDES[key] != CPU_OVERRIDES.get(key)} == differing
    assert all(GPU_HF_OVERRIDES[key] == CPU_OVERRIDES[key] for key in GPU_HF_OVERRIDES.keys() - differing)
    # the CPU platform's float32 and logical Ray GPU are all the GPU set-up leaves out
    assert CPU_OVERRIDES.keys() - GPU_HF_OVERRIDES.keys() == {
        "actor_rollout_ref.actor.fsdp_config.mixed_precision", "actor_rollout_ref.ref.fsdp_config.mixed_precision",
        "ray_kwargs.ray_init.num_gpus"}


def test_tiny_task_rows_and_reward_score_with_the_tasks_own_score():
    from dara.tasks import get_task
    from dara.verl_plugin.rewards import compute_tiny_task_score
    from dara.verl_backend.tiny_data import task_rows

    options = {"length_budget": 20, "concise_rate": 0.05, "max_checks": 3}
    frame = task_rows("math_length", options, "train", 4)
    assert len(frame) == 4 and frame["prompt"][0][0]["content"].endswith("Assistant:\n")
    item = json.loads(frame["reward_model"][0]["ground_truth"])
    answer = f"{item['answer']}. \\boxed{{{item['answer']}}}"
    extra = {**frame["extra_info"][0], "valid_response_length": 5}
    scores = compute_tiny_task_score(frame["data_source"][0], answer, frame["reward_model"][0]["ground_truth"], extra)
    expected = get_task("math_length", **options).score([answer], [item], [5])[0]
    assert scores == {"score": float(expected.sum()), "correctness": expected[0], "length": expected[1],
                      "parse_failure/correctness": 0.0, "parse_failure/length": 0.0}
    assert scores["correctness"] == 1.0 and scores["length"] == 1.0
    wrong = compute_tiny_task_score("x", "\\boxed{99}", frame["reward_model"][0]["ground_truth"],
                                    {**extra, "valid_response_length": 50})
    assert wrong["correctness"] == 0.0 and wrong["length"] == 0.0 and wrong["parse_failure/correctness"] == 0.0
    unreadable = compute_tiny_task_score("x", "no box here", frame["reward_model"][0]["ground_truth"], extra)
    assert unreadable["correctness"] == 0.0 and unreadable["parse_failure/correctness"] == 1.0
    with pytest.raises(KeyError, match="TokenCountRewardManager"):
        compute_tiny_task_score("x", answer, frame["reward_model"][0]["ground_truth"], frame["extra_info"][0])


def _verl_batch(rewards, uids):
    n = len(uids)
    mask = torch.ones(n, 3)
    return torch.zeros(n, 3), mask, np.array(uids, dtype=object), {"f": rewards[:, 0], "c": rewards[:, 1]}


def test_a_section_with_reward_keys_only_takes_every_other_setting_from_the_library():
    from dara.advantages import DVAO_DENOM_EPS, EPS, SIGN_EPS, TAU, W_MAX

    settings = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"]}})
    assert settings == DaraSettings(reward_keys=("f", "c"))
    assert (settings.w_max, settings.tau, settings.eps, settings.gd2po_sign_eps, settings.dvao_eps) == (
        W_MAX, TAU, EPS, SIGN_EPS, DVAO_DENOM_EPS)
    assert settings.batch_norm == "token"  # verl's tool stack whitens per token (verl's masked_whiten)


def test_verl_path_survives_a_singleton_group_and_counts_it():
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    scores, mask, uids, columns = _verl_batch(rewards, ["a", "a", "b", "b", "c"])
    settings = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"]}})
    assert settings.singleton_groups == "zero"
    advantages, result = dara_advantages("dara_asym", scores, mask, uids, settings, columns)
    assert torch.all(advantages[4] == 0) and torch.any(advantages[:4] != 0)
    assert result.metrics["singleton_groups"] == 1.0
    strict = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"], "singleton_groups": "raise"}})
    with pytest.raises(ValueError, match="at least two responses"):
        dara_advantages("dara_asym", scores, mask, uids, strict, columns)
    with pytest.raises(ValueError, match="singleton_groups must be"):
        DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f"], "singleton_groups": "drop"}})


def test_verl_settings_pass_the_epsilons_to_the_estimators():
    rewards = np.array([[0.0, 0.0], [0.01, 0.0], [0.0, 1.0], [1.0, 0.0]])
    scores, mask, uids, columns = _verl_batch(rewards, ["a", "a", "b", "b"])
    default = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"]}})
    raised = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"], "dvao_eps": 0.1}})
    assert torch.all(dara_advantages("dvao", scores, mask, uids, default, columns)[0][:2] != 0)
    assert torch.all(dara_advantages("dvao", scores, mask, uids, raised, columns)[0][:2] == 0)
    loose = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"], "gd2po_sign_eps": 10.0}})
    _, result = dara_advantages("gd2po_hard", scores, mask, uids, loose, columns)
    assert result.metrics["gd2po_hard/conflict_ratio"] == 0.0


@pytest.mark.parametrize("method", ["dara_sym", "grpo"])
def test_an_option_of_another_method_is_refused_by_the_estimator_and_the_prefilter_alike(method):
    """One rule at the method's definition (`Method.options`): an epsilon of GD2PO-Hard's in a DARA or GRPO run
    fails in the advantage step and in the pre-filter view, instead of being dropped by one and refused by the
    other."""
    from dara.verl_plugin.prefilter import prefilter_metrics

    rewards = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    scores, mask, uids, columns = _verl_batch(rewards, ["a", "a", "b", "b"])
    loose = DaraSettings.from_algorithm_config({"dara": {"reward_keys": ["f", "c"], "gd2po_sign_eps": 10.0}})
    message = f"algorithm.dara.gd2po_sign_eps is only read by gd2po_hard, not by {method}"  # the key as written
    with pytest.raises(ValueError, match=message):
        dara_advantages(method, scores, mask, uids, loose, columns)
    with pytest.raises(ValueError, match=message):
        prefilter_metrics(method, loose, rewards.tolist(), ["a", "a", "b", "b"])


@pytest.mark.parametrize("top_k, most_distinct", [(-1, None), (5, 5)])
def test_the_cpu_rollout_samples_the_whole_distribution_unless_top_k_is_set(top_k, most_distinct):
    """Transformers fills an unset top_k with 50; the CPU rollout must not truncate what verl asked to sample in full
    (its log-probs describe the full distribution)."""
    from dara.tiny.policy import build_model
    from dara.verl_plugin.cpu_backend.hf_rollout import sampling_config

    torch.manual_seed(0)
    model = build_model(300, hidden_size=16, layers=1, heads=2, kv_heads=1, intermediate_size=32).eval()
    with torch.no_grad():  # 300 nearly equally likely tokens, no two tied (ties would defeat a top-k cut)
        model.lm_head.weight.copy_(torch.linspace(0.0, 0.01, 300)[:, None].expand(300, 16))
    prompt = torch.full((600, 3), 7, dtype=torch.long)
    config = sampling_config(1.0, 1.0, top_k, 1, eos_token_ids=None, pad_token_id=0)
    with torch.no_grad():
        drawn = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    distinct = len(set(drawn.sequences[:, -1].tolist()))
    if most_distinct is None:
        assert distinct > 200  # 600 uniform draws over 300 tokens hit about 259 of them
    else:
        assert distinct <= most_distinct
