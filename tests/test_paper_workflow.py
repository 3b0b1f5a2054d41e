"""`snakemake -n --config scale=paper` plans the whole paper study on a CPU machine, with GPU resources per run."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dara.experiments import load_experiment
from dara.runs import Run, find_run

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def dry_run(*extra: str) -> str:
    if not SNAKEMAKE.exists():
        pytest.skip("snakemake is not installed in this environment")
    result = subprocess.run(
        [str(SNAKEMAKE), "-n", "--config", "scale=paper", "--cores", "1", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def plan() -> str:
    return dry_run()


def job_count(plan: str, rule: str) -> int:
    match = re.search(rf"^{rule}\s+(\d+)\s*$", plan, flags=re.MULTILINE)
    assert match, f"no {rule} line in the job stats"
    return int(match.group(1))


def jobs_of(plan: str, prefix: str) -> int:
    """Jobs of every rule whose name starts with ``prefix`` (one generated rule per training job); the job-stats
    table appears twice in a dry run's output, so each rule counts once."""
    rows = dict(re.findall(rf"^({prefix}\S*)\s+(\d+)\s*$", plan, flags=re.MULTILINE))
    return sum(int(count) for count in rows.values())


def test_the_paper_plan_has_every_run_and_both_datasets(plan):
    assert jobs_of(plan, "train_") == 134  # one job per run: each has its own GPUs
    assert job_count(plan, "prepare_paper_data") == 2
    assert jobs_of(plan, "view_") == 86  # the shared view: primary-model runs of every target
    # every training job runs verl through the launcher; no CPU trainer and no warm start at paper scale
    assert plan.count("python -m dara.verl_backend.launch train") == 134
    assert "dara.tiny.trainer" not in plan and "dara.tiny.warmstart" not in plan


def resources_of(block: str) -> set[str]:
    line = next(line for line in block.splitlines() if line.strip().startswith("resources:"))
    return {part.strip() for part in line.split(":", 1)[1].split(",")}


def test_gpu_resources_come_from_the_runs_model(plan):
    blocks = plan.split("\nrule ")
    seven_b = next(b for b in blocks if "math_length-r1-distill-7b/dara_sym/G16/seed0/metrics.parquet" in b.split("\n")[2])
    # the paper trains R1-Distill-7B on one node of 8 GPUs
    assert resources_of(seven_b) >= {"gres=gpu:a100_80gb:8", "nodes=1", "runtime=4320"}
    tool = next(b for b in blocks if "toolcall-qwen2.5-3b/grpo/G4/seed1/metrics.parquet" in b.split("\n")[2])
    assert resources_of(tool) >= {"gres=gpu:a100_40gb:4", "nodes=1", "runtime=420",
                                  "cpus_per_task=64", "mem_mb=480000"}
    # the job gets its run resolved (dara.runs.Run.to_json), not a folder to look up again
    command = next(line for line in tool.splitlines() if "dara.verl_backend.launch train" in line)
    words = shlex.split(command[command.index("profiles/slurm/ray_job.sh"):])
    assert words[:7] == ["profiles/slurm/ray_job.sh", "python", "-m", "dara.verl_backend.launch", "train", "--run",
                         words[6]]
    run = Run.from_json(words[6])
    assert run.run_dir == "results/paper/runs/toolcall-qwen2.5-3b/grpo/G4/seed1"
    assert run.settings == find_run(load_experiment("paper"), "toolcall-qwen2.5-3b", "grpo", 4, 1).settings


def test_a_target_plans_only_its_runs():
    plan = dry_run("static_ablation")
    assert jobs_of(plan, "train_") == 2
    assert job_count(plan, "prepare_paper_data") == 1
