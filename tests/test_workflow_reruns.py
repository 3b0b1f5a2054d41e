"""Reruns follow settings: on the finished smoke tree, editing one setting of the smoke experiment plans exactly
the jobs it changes (Snakemake's params trigger sees each job's resolved settings), and editing a comment plans
nothing. The edits go to a copy of experiments/ that the workflow reads through DARA_EXPERIMENTS_DIR, so the
checkout's files are never touched, even by a killed test."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dara.experiments import EXPERIMENTS_DIR_VARIABLE

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "smoke.yaml"
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
ACT_TARGET = "  act_critic: {task: act_critic, methods: [dara_sym], group_sizes: [4], seeds: [0]}"


def planned_jobs(experiments: Path | None = None) -> dict[str, int]:
    """Jobs a dry run plans, by rule, with scale names read from ``experiments`` (default: the checkout's)."""
    env = {key: value for key, value in os.environ.items() if key != EXPERIMENTS_DIR_VARIABLE}
    if experiments is not None:
        env[EXPERIMENTS_DIR_VARIABLE] = str(experiments)
    result = subprocess.run([str(SNAKEMAKE), "-n", "--quiet", "rules", "--config", "scale=smoke"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    jobs = {}
    for line in (result.stdout + result.stderr).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in ("job", "total"):
            jobs[parts[0]] = int(parts[1])
    return jobs


@pytest.fixture
def edited(smoke_results, tmp_path):
    """Edit a copy of experiments/smoke.yaml by a text replacement; returns the planned jobs after the edit."""
    original = SMOKE.read_text()
    assert ACT_TARGET in original, "the smoke experiment changed: update ACT_TARGET"
    copy = tmp_path / "experiments"
    shutil.copytree(SMOKE.parent, copy)

    def edit(old: str, new: str) -> dict[str, int]:
        assert old in original, old
        (copy / SMOKE.name).write_text(original.replace(old, new, 1))
        return planned_jobs(copy)

    yield edit
    assert SMOKE.read_text() == original


def _training_and_evaluation(jobs):
    return {name for name in jobs if name.startswith(("train_", "evaluate_", "warm_start"))}


def test_a_finished_tree_plans_nothing(smoke_results):
    assert planned_jobs() == {}


def test_a_comment_edit_plans_nothing(edited):
    assert edited("scale: smoke\n", "scale: smoke  # a comment that changes nothing\n# and a new comment line\n") == {}


def test_one_setting_of_one_target_reruns_that_targets_jobs_only(edited):
    jobs = edited(ACT_TARGET, ACT_TARGET[:-1] + ", settings: {learning_rate: 0.002}}")
    # that run's training and the held-out evaluation of its task and G (the regime table reads it) only
    assert _training_and_evaluation(jobs) == {"train_act_critic_dara_sym_G4", "evaluate_act_critic_G4"}
    # the artifacts drawn from act_critic's runs follow; those of other tasks do not
    assert {"first_crossing", "dynamics", "fig1b", "regime", "report_md"} <= set(jobs)
    assert not {"fig3", "fig4", "fig5", "table1", "table2", "table4a", "backends"} & set(jobs)


def test_a_warm_start_setting_reruns_that_tasks_warm_start_and_its_runs(edited):
    jobs = edited("  act_critic:\n    options: {tag_rate: 0.1}\n",
           "  act_critic:\n    options: {tag_rate: 0.1}\n    warm_start: {sft_steps: 31}\n")
    assert jobs.get("warm_start") == 1
    assert jobs.get("evaluate_warm_start") == 1  # the new warm start's own held-out evaluation
    assert _training_and_evaluation(jobs) == {"warm_start", "evaluate_warm_start", "train_act_critic_dara_sym_G4",
                                              "evaluate_act_critic_G4"}


def test_an_evaluation_setting_reruns_every_evaluation_and_no_training(edited):
    jobs = edited("\nevaluation:\n", "\nevaluation:\n  samples: 1\n")
    from dara.experiments import load_experiment
    from dara.runs import evaluation_jobs, run_matrix

    every_job = {f"evaluate_{job.name}" for job in evaluation_jobs(run_matrix(load_experiment("smoke")))}
    every_job.add("evaluate_warm_start")  # its params are the evaluation settings too
    planned = _training_and_evaluation(jobs)
    # evaluations only (every one the artifacts read: the tool and math tasks at their main G), no training
    assert planned <= every_job
    assert {"evaluate_toolcall_G4", "evaluate_math_length_G4", "evaluate_toolcall3_G4"} <= planned
