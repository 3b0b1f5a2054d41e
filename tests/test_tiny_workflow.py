"""The Snakemake side of the tiny pipeline: `snakemake -n` is the first test (dry runs, nothing trained)."""

import subprocess
import sys
from pathlib import Path

import pytest

from dara.experiments import load_experiment
from dara.runs import evaluation_jobs, most_common_group_size, run_matrix, training_jobs

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
    assert job_count(output, "warm_start") == len({(r.task, r.warm_start) for r in runs})
    assert job_count(output, "evaluate_warm_start") == len({(r.task, r.warm_start) for r in runs})
    # one evaluation job per task, at the G its tables read (the group-size sweep's other G are not evaluated)
    evaluated = [job for job in evaluation_jobs(runs) if job_count(output, f"evaluate_{job.name}")]
    main_g = {task: most_common_group_size(r.group_size for r in runs if r.task == task)
              for task in {r.task for r in runs}}
    assert sorted((job.runs[0].task, job.runs[0].group_size) for job in evaluated) == sorted(main_g.items())
    assert all(job_count(output, f"evaluate_{job.name}") == 1 for job in evaluated)


def test_evaluation_jobs_hold_every_run_of_one_backend_task_and_group_size_once():
    runs = run_matrix(load_experiment("tiny"))
    jobs = evaluation_jobs(runs)
    assert sorted(run.run_dir for job in jobs for run in job.runs) == sorted(run.run_dir for run in runs)
    for job in jobs:
        assert len({(run.backend, run.task, run.group_size) for run in job.runs}) == 1
    assert len({job.name for job in jobs}) == len(jobs)
    headline = next(job for job in jobs if job.name == "toolcall_G4")
    # by method in the experiment's order, then seed
    assert [run.method for run in headline.runs][:11] == ["grpo"] * 10 + ["gdpo"]
    assert [run.seed for run in headline.runs][:10] == list(range(10))
    assert next(job for job in jobs if job.backend == "trl").name == "trl_toolcall_G4"


def test_a_single_run_is_a_file_target():
    code, output = dry_run("--forceall", "results/tiny/runs/toolcall/dara_sym/G8/seed0/metrics.parquet")
    assert code == 0, output
    # the job trains every seed of its (task, method, G), so it needs each warm start they start from
    warm_starts = {run.warm_start for run in run_matrix(load_experiment("tiny"))
                   if (run.task, run.method, run.group_size) == ("toolcall", "dara_sym", 8)}
    assert len(warm_starts) == 5
    assert job_count(output, "train_toolcall_dara_sym_G8") == 1 and job_count(output, "warm_start") == len(warm_starts)


def test_a_named_target_builds_its_runs_only():
    code, output = dry_run("--forceall", "three_rewards")
    assert code == 0, output
    assert job_count(output, "train_toolcall3_grpo_G4") == 1 and job_count(output, "train_toolcall_grpo_G4") == 0


def test_an_opt_in_target_stays_out_of_the_default_run_and_its_jobs_time_out_of_make_reproduces():
    """`trl` is opt-in: `snakemake` alone plans none of its jobs, and when run by name its jobs' benchmarks go to
    benchmarks/opt_in/, which the snapshot's cost of make reproduce leaves out (analysis/snapshot.py)."""
    def benchmarks(*args):
        result = subprocess.run([str(SNAKEMAKE), "-n", "--forceall", *args], cwd=ROOT, capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        return [line.split()[1] for line in result.stdout.splitlines() if line.strip().startswith("benchmark:")]

    default = benchmarks()
    assert default and not any("trl" in path or "opt_in" in path for path in default)
    trl = {path for path in benchmarks("trl") if "/train/" in path}
    opt_in_folder = "results/tiny/benchmarks/opt_in/train"
    assert {path for path in trl if "/trl_" in path} == {f"{opt_in_folder}/trl_toolcall_{method}_G4.tsv"
                                                         for method in ("gdpo", "dara_sym", "dara_asym")}
    # the tiny trainer's runs it compares against are make reproduce's own jobs
    assert "results/tiny/benchmarks/train/toolcall_gdpo_G4.tsv" in trl


def test_a_typo_in_the_experiment_stops_the_workflow_naming_the_key(tmp_path):
    bad = tmp_path / "typo.yaml"
    text = (ROOT / "experiments" / "smoke.yaml").read_text().replace("  learning_rate:", "  learning_rat:")
    bad.write_text(text)
    code, output = dry_run("--config", f"scale={bad}")
    assert code != 0 and "learning_rat" in output
