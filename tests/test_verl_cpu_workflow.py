"""`snakemake -n --config scale=verl_cpu` plans verl's loop on CPU with the tiny tasks: warm starts, verl data, local
verl jobs (no Slurm, no Ray cluster script), the tiny trainer's twins, CPU evaluation of verl's checkpoints and the
backends comparison. The run itself is `make verl-cpu` (about an hour on 2 cores); tests/test_verl_cpu_e2e.py runs verl."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


@pytest.fixture(scope="module")
def plan() -> str:
    if not SNAKEMAKE.exists():
        pytest.skip("snakemake is not installed in this environment")
    # --forceall: the whole plan whatever results/verl_cpu already holds
    result = subprocess.run([str(SNAKEMAKE), "-n", "--forceall", "--config", "scale=verl_cpu", "--cores", "2"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def rule_blocks(plan: str, prefix: str) -> list[str]:
    """The dry run's job blocks of rules whose names start with ``prefix``."""
    return [block for block in plan.split("\nrule ")[1:] if block.startswith(prefix)]


def test_every_stage_of_the_scale_is_planned(plan):
    from dara.experiments import load_experiment
    from dara.runs import run_matrix

    runs = run_matrix(load_experiment("verl_cpu"))
    verl_runs = [run for run in runs if run.backend == "verl"]
    tiny_runs = [run for run in runs if run.backend == "tiny"]
    assert len(verl_runs) == len(tiny_runs) == 24  # 2 tasks x 4 methods x 3 seeds
    assert {run.seed for run in verl_runs} == {0, 1, 2}
    assert {(r.task, r.method, r.group_size, r.seed) for r in verl_runs} == \
           {(r.task, r.method, r.group_size, r.seed) for r in tiny_runs}  # every verl run has its twin
    assert len(rule_blocks(plan, "warm_start:")) == 2
    data_jobs = rule_blocks(plan, "prepare_tiny_verl_data:")
    assert len(data_jobs) == 2
    (pool,) = {run.settings["prompt_pool"] for run in tiny_runs}
    assert all(f"--train-items {pool} " in job for job in data_jobs)  # verl trains on the twins' prompt pool
    assert not rule_blocks(plan, "prepare_paper_data:")  # no hub download on this scale
    verl_jobs = [b for b in rule_blocks(plan, "train_") if "dara.verl_backend.launch train" in b]
    tiny_jobs = [b for b in rule_blocks(plan, "train_") if "dara.tiny.trainer" in b]
    assert len(verl_jobs) == 24 and len(tiny_jobs) == 8  # verl: a job per run; the twins: one seed group each
    for block in verl_jobs:
        assert "ray_job.sh" not in block  # verl starts its own local Ray cluster
        assert "threads: 2" in block  # one verl job at a time on 2 cores
        assert re.search(r"results/verl_cpu/data/(toolcall|math_length)/train\.parquet", block)
    # verl's checkpoints are evaluated by the CPU evaluation, not by vLLM
    evaluations = [b for b in rule_blocks(plan, "evaluate_") if "dara.evaluation.tiny_heldout" in b]
    assert any("results/verl_cpu/runs/toolcall-tiny_tool/dara_asym/G4/seed0" in b for b in evaluations)
    assert "vllm" not in plan and not rule_blocks(plan, "bfcl_generate")
    backends = rule_blocks(plan, "backends:")
    assert len(backends) == 1
    assert "results/verl_cpu/tiny/runs/toolcall/dara_asym/G4/seed0/metrics.parquet" in backends[0]
    assert "results/verl_cpu/runs/toolcall/dara_asym/G4/seed0/metrics.parquet" in backends[0]  # verl's shared view


def test_the_twins_settings_match_verls():
    """The side-by-side is only meaningful where both trainers were told the same thing: verl_cpu.yaml states each
    shared setting once, and each verl run has it in verl's keys, with the value its tiny twin reads."""
    from dara.experiments import load_experiment
    from dara.runs import run_matrix

    runs = run_matrix(load_experiment("verl_cpu"))
    for verl_run in (run for run in runs if run.backend == "verl"):
        twin = next(r for r in runs if r.backend == "tiny" and (r.task, r.method, r.group_size, r.seed) ==
                    (verl_run.task, verl_run.method, verl_run.group_size, verl_run.seed))
        verl, tiny = verl_run.settings, twin.settings
        assert tiny["steps"] == verl["steps"] and tiny["responses_per_step"] == verl["responses_per_step"]
        assert tiny["learning_rate"] == verl["verl"]["actor_rollout_ref.actor.optim.lr"]
        # verl steps its scheduler once per rollout step, the tiny trainer once per update: the warm-ups agree
        # only with one minibatch a step (or none)
        assert tiny["lr_warmup_updates"] == verl["verl"]["actor_rollout_ref.actor.optim.lr_warmup_steps"]
        assert tiny["lr_warmup_updates"] == 0 or tiny["minibatches"] == 1
        assert tiny["kl_coef"] == verl["verl"]["actor_rollout_ref.actor.kl_loss_coef"]
        assert verl["verl"]["actor_rollout_ref.actor.use_kl_loss"] == (tiny["kl_coef"] > 0)
        assert verl["verl"]["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"  # k3, as the tiny trainer's
        assert tiny["clip_ratio"] == verl["verl"]["actor_rollout_ref.actor.clip_ratio"]
        assert tiny["entropy_coef"] == verl["verl"]["actor_rollout_ref.actor.entropy_coeff"]
        assert tiny["max_grad_norm"] == verl["verl"]["actor_rollout_ref.actor.grad_clip"]
        assert tiny["max_new_tokens"] == verl["verl"]["data.max_response_length"]
        assert tiny["temperature"] == verl["verl"]["actor_rollout_ref.rollout.temperature"]
        assert tiny["eval_every"] == verl["verl"]["trainer.save_freq"]
        assert tiny["responses_per_step"] // tiny["minibatches"] == verl["mini_batch_responses"]
        assert tiny["batch_norm"] == verl["batch_norm"] and tiny["w_max"] == verl["w_max"]
        assert tiny["task_options"] == verl["task_options"]
        assert set(twin.checkpoint_steps) >= set(verl_run.checkpoint_steps)
