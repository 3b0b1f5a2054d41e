"""The Snakemake side of the tiny pipeline: `snakemake -n` is the first test (dry runs, nothing trained)."""

import subprocess
import sys
from pathlib import Path

import pytest

from dara.experiments import load_experiment
from dara.runs import run_matrix, training_jobs

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def dry_run(*args):
    result = subprocess.run([str(SNAKEMAKE), "-n", "--quiet", "rules", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    return result.returncode, result.stdout + result.stderr


def job_count(output: str, rule: str) -> int:
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == rule:
            return int(parts[1])
    return 0


@pytest.mark.parametrize("scale", ["tiny", "smoke"])
def test_dry_run_plans_one_training_job_per_task_method_and_group_size(scale):
    code, output = dry_run("--config", f"scale={scale}", "--forceall")
    assert code == 0, output
    runs = [run for run in run_matrix(load_experiment(scale)) if run.backend == "tiny"]
    groups = {(r.task, r.method, r.group_size) for r in runs}
    assert sum(job_count(output, f"train_{t}_{m}_G{g}") for t, m, g in groups) == len(groups)
    assert sum(job_count(output, f"train_{job.name}") for job in training_jobs(runs)) == len(groups)
    assert job_count(output, "warm_start") == len({r.task for r in runs})


def test_a_single_run_is_a_file_target():
    code, output = dry_run("--forceall", "results/tiny/runs/toolcall/dara_sym/G8/seed0/metrics.parquet")
    assert code == 0, output
    assert job_count(output, "train_toolcall_dara_sym_G8") == 1 and job_count(output, "warm_start") == 1


def test_a_named_target_builds_its_runs_only():
    code, output = dry_run("--forceall", "three_rewards")
    assert code == 0, output
    assert job_count(output, "train_toolcall3_grpo_G4") == 1 and job_count(output, "train_toolcall_grpo_G4") == 0


def test_a_typo_in_the_experiment_stops_the_workflow_naming_the_key(tmp_path):
    bad = tmp_path / "typo.yaml"
    text = (ROOT / "experiments" / "smoke.yaml").read_text().replace("  learning_rate:", "  learning_rat:")
    bad.write_text(text)
    code, output = dry_run("--config", f"scale={bad}")
    assert code != 0 and "learning_rat" in output
