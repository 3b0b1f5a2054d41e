"""`snakemake -n --config scale=paper` plans the whole paper study on a CPU machine, with GPU resources per run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_paper_plan_has_every_run_and_both_datasets(plan):
    assert job_count(plan, "train_paper") == 134
    assert job_count(plan, "prepare_paper_data") == 2
    assert job_count(plan, "paper_primary_view") == 86  # the shared view: primary-model runs of every target
    assert "rule train:" not in plan and "rule warm_start:" not in plan  # no tiny rules at paper scale


def test_gpu_resources_come_from_the_runs_model(plan):
    blocks = plan.split("\nrule ")
    seven_b = next(b for b in blocks if "math_length-r1-distill-7b/dara_sym/G16/seed0/metrics.parquet" in b.split("\n")[2])
    assert re.search(r"gpu=8, gpu_model=a100-80gb, nodes=1, gpus_per_node=8, runtime=4320", seven_b)  # PAPER.md C
    tool = next(b for b in blocks if "toolcall-qwen2.5-3b/grpo/G4/seed1/metrics.parquet" in b.split("\n")[2])
    assert re.search(r"gpu=4, gpu_model=a100-40gb, nodes=1, gpus_per_node=4, runtime=420", tool)
    assert "profiles/slurm/ray_job.sh python -m dara.verl_plugin.launch train --run-task toolcall-qwen2.5-3b" in tool


def test_a_target_plans_only_its_runs():
    plan = dry_run("paper_static_ablation")
    assert job_count(plan, "train_paper") == 2
    assert job_count(plan, "prepare_paper_data") == 1
