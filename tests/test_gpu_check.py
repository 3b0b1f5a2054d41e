"""The logic of ``make gpu-check`` (benchmarks/gpu_check.py) without a GPU and without running it: the parity
checks on constructed tensors (one must fail), the summary and exit status, the runs it describes and their verl
settings on a GPU, and that it needs neither Snakemake nor math-verify. The whole check's CPU dry run is
``make gpu-check DEVICE=cpu`` (minutes, not part of the suite)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from benchmarks import gpu_check
from benchmarks.gpu_check import Part, exit_status, max_abs_difference, metrics_rows_table, summary_markdown, within

ROOT = Path(__file__).resolve().parents[1]


def test_max_abs_difference_on_constructed_tensors():
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert max_abs_difference(a, a.clone()) == 0.0  # NaN where both have it is agreement
    assert max_abs_difference(a, torch.tensor([0.0, 1.5, float("nan")], dtype=torch.float64)) == 0.5
    assert max_abs_difference(a, torch.tensor([0.0, 1.0, 2.0])) == math.inf  # NaN on one side only
    assert max_abs_difference(a, a[:2]) == math.inf
    assert max_abs_difference(torch.zeros(0), torch.zeros(0)) == 0.0


def test_within_passes_inside_the_tolerance_and_fails_outside():
    part = Part("parity")
    reference = torch.linspace(-3, 3, 50, dtype=torch.float64)
    assert within(part, "close", reference, (reference + 5e-7).float(), 1e-6)
    assert not within(part, "far", reference, reference + 2e-6, 1e-6)
    assert [check.passed for check in part.checks] == [True, False]
    assert "max |diff| 2e-06 (tolerance 1e-06)" in part.checks[1].detail
    assert not part.passed


def test_the_summary_gives_each_parts_verdict_and_the_exit_status_follows(tmp_path):
    good = Part("parity", seconds=3.2)
    good.check("estimators", True, "largest |diff| 0")
    frame = pd.DataFrame({"step": [0, 1, 2], "reward/format": [0.0, 0.25, 0.5], "unshown": [1, 2, 3],
                          "seconds": [9.0, 1.0, float("nan")]})
    good.tables.append(metrics_rows_table(frame))
    bad = Part("verl: gdpo", seconds=80)
    bad.fail("verl gdpo: launch", "Traceback (most recent call last):\n  ...\nRuntimeError: the hf rollout broke")
    skipped = Part("verl: dara_asym", ran=False, notes=["12 s left of --time-limit"])
    environment = {"machine": "NVIDIA H100 80GB HBM3", "version torch": "2.11.0+cu130"}

    text = summary_markdown(environment, [good, bad, skipped])
    assert text.startswith("# GPU check: FAIL")
    assert "- machine: NVIDIA H100 80GB HBM3" in text and "- version torch: 2.11.0+cu130" in text
    assert "| parity | PASS | 3 |" in text and "| verl: gdpo | FAIL | 80 |" in text
    assert "| verl: dara_asym | not run |  |" in text and "not run: 12 s left of --time-limit" in text
    assert "- FAIL verl gdpo: launch: RuntimeError: the hf rollout broke" in text
    assert "```\nTraceback" in text  # the whole tail, for whoever reads the summary without the logs
    # the first and last rows, only the summary's columns
    assert "| step | reward/format | seconds |\n|---|---|---|\n| 0 | 0 | 9 |\n| 2 | 0.5 | nan |" in text
    assert "unshown" not in text
    assert exit_status([good, bad, skipped]) == 1
    assert exit_status([good, skipped]) == 1  # a part that did not run is no pass
    assert exit_status([good]) == 0 and summary_markdown(environment, [good]).startswith("# GPU check: PASS")
    assert exit_status([Part("no checks")]) == 1 and exit_status([]) == 1


def test_estimator_parity_covers_every_method_and_fails_on_a_difference(monkeypatch):
    from dara.methods import METHODS

    part = Part("parity")
    gpu_check.estimator_parity(part, "cpu")
    assert part.passed and len(part.checks) == 3
    assert f"{len(METHODS)} methods" in part.checks[0].name

    # an estimator whose every other call is off by 1e-5: the check must see it
    import dara.advantages as advantages

    real = advantages.compute_advantages
    calls = []

    def drifting(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append(1)
        if len(calls) % 2 == 0:
            return type(result)(result.advantages + 1e-5, result.density, result.weights, result.loss_weights,
                                result.metrics)
        return result

    monkeypatch.setattr(advantages, "compute_advantages", drifting)
    broken = Part("parity")
    gpu_check.estimator_parity(broken, "cpu")
    assert not broken.passed
    failed = [check for check in broken.checks if not check.passed]
    assert failed[0].name.startswith("estimator grpo") and "advantages" in failed[0].name
    assert all("loss_weights" not in check.name and "metrics" not in check.name for check in failed)


@pytest.fixture(scope="module")
def gpu_experiment(tmp_path_factory):
    from dara.experiments import load_experiment

    folder = tmp_path_factory.mktemp("gpu_check")
    experiment = gpu_check.check_experiment("cuda", 10, folder / "data", {"trainer.val_before_train": False})
    path = folder / "experiment.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    return load_experiment(path)  # the schema's check


def test_the_check_runs_verl_with_two_methods_and_trl_with_three(gpu_experiment):
    from dara.runs import run_matrix

    runs = run_matrix(gpu_experiment)
    assert sorted(r.method for r in runs if r.backend == "verl") == ["dara_asym", "gdpo"]
    assert sorted(r.method for r in runs if r.backend == "trl") == ["dara_asym", "gdpo", "grpo"]
    assert {r.task for r in runs} == {"toolcall"} and {r.seed for r in runs} == {0}
    verl = [r for r in runs if r.backend == "verl"][0]
    assert verl.settings["steps"] == 10 and verl.checkpoint_steps == [5, 10]
    trl = [r for r in runs if r.backend == "trl"][0]
    assert trl.settings["steps"] == 10 and trl.checkpoint_steps == [0, 5, 10]


def test_a_gpu_run_gets_the_hf_rollouts_settings_and_composes_into_verls_config(gpu_experiment, tmp_path,
                                                                                 monkeypatch):
    verl = pytest.importorskip("verl")
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from dara.runs import run_matrix
    from dara.verl_backend.launch import hydra_overrides, run_environment, verl_overrides
    from dara.verl_plugin.cpu import BACKEND_MODULE, CPU_OVERRIDES, GPU_HF_OVERRIDES

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run = [r for r in run_matrix(gpu_experiment) if r.backend == "verl"][0]
    env = run_environment(run, tmp_path / "attempt1.jsonl")
    values = verl_overrides(run, tmp_path / "run", env=env)
    for key, value in GPU_HF_OVERRIDES.items():
        assert values[key] == value, key
    workers = {k.rsplit(".", 1)[1]: v for k, v in values.items() if k.startswith("ray_kwargs.ray_init.runtime_env.")}
    assert BACKEND_MODULE in workers["VERL_USE_EXTERNAL_MODULES"].split(",")  # the hf rollout is registered
    assert "VERL_PLATFORM" not in workers and "VERL_PLATFORM" not in env  # verl's own NVIDIA platform
    # verl's default mixed precision (bf16 parameters) and Ray's own GPU count: none of the CPU platform's
    for key in ("actor_rollout_ref.actor.fsdp_config.mixed_precision", "ray_kwargs.ray_init.num_gpus"):
        assert key in CPU_OVERRIDES and key not in values
    rendered = hydra_overrides(values)
    assert "+actor_rollout_ref.model.override_config.attn_implementation='sdpa'" in rendered
    assert "trainer.device='cuda'" in rendered
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=rendered)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.name == "hf" and rollout.dtype == "bfloat16"  # the dtype the hf rollout serves in on a GPU


def test_a_vllm_run_gets_none_of_the_hf_rollouts_settings(tmp_path, monkeypatch):
    from dara.experiments import load_experiment
    from dara.runs import run_matrix
    from dara.verl_backend.launch import run_environment, verl_overrides

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    run = run_matrix(load_experiment("paper"))[0]
    values = verl_overrides(run, tmp_path / "run", data_dir=tmp_path)
    assert values["actor_rollout_ref.rollout.name"] == "vllm"
    assert "actor_rollout_ref.model.override_config.attn_implementation" not in values
    assert "VERL_USE_EXTERNAL_MODULES" not in run_environment(run, tmp_path / "a.jsonl")


def test_the_check_imports_neither_snakemake_nor_math_verify(tmp_path):
    """The GPU bundle ships neither: the check's own imports and the tool-calling task's scoring must not need
    them (verl's and TRL's jobs import the same dara modules)."""
    script = """
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("snakemake", "math_verify"):
            raise ImportError(f"{name} is not in the GPU bundle")
sys.meta_path.insert(0, Refuse())
import benchmarks.gpu_check, dara.tiny.trainer, dara.trl.train, dara.verl_backend.launch
import dara.verl_plugin.cpu_backend.hf_rollout, dara.verl_backend.tiny_data
from dara.tasks import get_task
task = get_task("toolcall", format_rate=0.2, think_filler_max=0)
item = task.items("train", 1, seed=0)[0]
print(task.score([task.demonstration(item, __import__("numpy").random.default_rng(0))], [item], [10]).tolist())
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().startswith("[[")
