"""The smoke scale through snakemake-executor-plugin-slurm, with the project's Slurm profile (site lines set for
the local cluster), on a copy of the checkout: every job goes through sbatch; one training job is killed with
scancel once its first run has written a resume state, the profile's retry resumes it; every metric equals the
same runs made locally, in another copy of the same checkout, timing aside."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from local_slurm import write_test_profile

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
# two seeds in one job: killed once seed 0 has saved its step-2 state, so that the retry resumes a run mid-way
KILLED_RULE = "train_toolcall_grpo_G4"
KILLED_STATE = "results/smoke/runs/toolcall/grpo/G4/seed0/state.pt"
TIMING_COLUMNS = {"seconds"}
# what a held-out evaluation records besides its numbers: where and by which code it ran
EVALUATION_BOOKKEEPING = {"code_revision", "machine", "checkpoint", "copied_from"}


def copy_checkout(dest: Path) -> Path:
    """The files git tracks or would track (results/, environments and caches left out)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def slurm_jobs(cluster) -> list[dict[str, str]]:
    """Every job the Slurm executor submitted to the cluster (its comment names the rule; jobs of other tests in
    the session have none): id, state, rule."""
    out = cluster.run("sacct", "-X", "-n", "-P", "-S", "now-3600", "-o", "JobID,State,Comment").stdout
    jobs = []
    for line in out.splitlines():
        job_id, state, comment = line.split("|", 2)
        rule = re.match(r"rule_(\S+?)(?:_wildcards_.*)?$", comment)
        if rule:
            jobs.append({"id": job_id, "state": state.split()[0], "rule": rule.group(1)})
    return jobs


def cancel_when_state_appears(cluster, workdir: Path, process: subprocess.Popen, timeout_s: float) -> str:
    """scancel the Slurm job of KILLED_RULE as soon as KILLED_STATE exists; returns the cancelled job's id."""
    state = workdir / KILLED_STATE
    deadline = time.monotonic() + timeout_s
    while not state.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{KILLED_STATE} never appeared while the workflow ran")
        time.sleep(0.05)
    queue = cluster.run("squeue", "-h", "-o", "%i|%k").stdout
    ids = [line.split("|")[0] for line in queue.splitlines() if f"rule_{KILLED_RULE}" in line]
    assert len(ids) == 1, f"expected one running {KILLED_RULE} job: {queue}"
    cluster.run("scancel", ids[0])
    return ids[0]


@pytest.fixture(scope="module")
def local_smoke(tmp_path_factory) -> Path:
    """results/smoke of the same code run locally (not the checkout's own results/smoke: Snakemake does not rerun
    a tree made by older code, so that one may be stale)."""
    workdir = copy_checkout(tmp_path_factory.mktemp("local"))
    result = subprocess.run([str(SNAKEMAKE), "--cores", "2", "--config", "scale=smoke"], cwd=workdir,
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return workdir / "results" / "smoke"


@pytest.fixture(scope="module")
def slurm_smoke(slurm_cluster, tmp_path_factory):
    if not SNAKEMAKE.exists():
        pytest.skip("snakemake is not installed in this environment")
    pytest.importorskip("snakemake_executor_plugin_slurm")
    workdir = copy_checkout(tmp_path_factory.mktemp("checkout"))
    profile = write_test_profile(tmp_path_factory.mktemp("profile"), partition="cpu")
    log = workdir / "snakemake.log"
    with open(log, "w") as out:
        process = subprocess.Popen([str(SNAKEMAKE), "--config", "scale=smoke", "--profile", str(profile)],
                                   cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **slurm_cluster.env()})
        try:
            cancelled = cancel_when_state_appears(slurm_cluster, workdir, process, timeout_s=900)
            process.wait(timeout=1200)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 0, log.read_text()[-8000:]
    return workdir, cancelled, log.read_text()


def test_every_job_ran_through_sbatch(slurm_cluster, slurm_smoke):
    workdir, cancelled, log = slurm_smoke
    jobs = slurm_jobs(slurm_cluster)
    planned = re.search(r"^total\s+(\d+)$", log, flags=re.MULTILINE)
    assert planned, log[-3000:]
    # every job but the target rule `all` (no command: Snakemake runs it on the submitting host), and the killed
    # job's retry as one more
    submitted_once = int(planned.group(1)) - 1
    assert len(jobs) == submitted_once + 1
    assert all(job["state"] == "COMPLETED" for job in jobs if job["id"] != cancelled), jobs
    assert next(job for job in jobs if job["id"] == cancelled)["state"] == "CANCELLED"
    # each training job's own log where its rule puts it; the executor keeps the Slurm log of the failed attempt
    # only (it deletes those of successful jobs) and shows it (show-failed-logs)
    for job in jobs:
        if job["rule"].startswith("train_"):
            assert (workdir / "results/smoke/logs/train" / f"{job['rule'].removeprefix('train_')}.log").is_file()
    slurm_log = workdir / ".snakemake" / "slurm_logs" / f"rule_{KILLED_RULE}" / f"{cancelled}.log"
    assert f"JOB {cancelled} ON" in slurm_log.read_text() and "CANCELLED" in slurm_log.read_text()
    assert f"*** JOB {cancelled} ON" in log


def test_the_killed_job_was_retried_and_resumed(slurm_cluster, slurm_smoke):
    workdir, cancelled, _ = slurm_smoke
    attempts = [job for job in slurm_jobs(slurm_cluster) if job["rule"] == KILLED_RULE]
    assert [job["state"] for job in attempts] == ["CANCELLED", "COMPLETED"]
    retry_log = (workdir / "results/smoke/logs/train/toolcall_grpo_G4.log").read_text()
    assert re.search(r"toolcall/grpo/G4/seed0: resuming from its state at step [1-9]", retry_log), retry_log[-3000:]


def test_results_equal_the_local_run(slurm_smoke, local_smoke):
    workdir, _, _ = slurm_smoke
    smoke_results = local_smoke
    on_slurm = workdir / "results" / "smoke"
    runs = sorted(path.relative_to(smoke_results) for path in smoke_results.rglob("runs/**/metrics.parquet"))
    assert len(runs) >= 10
    for relative in runs:
        local, remote = pd.read_parquet(smoke_results / relative), pd.read_parquet(on_slurm / relative)
        pd.testing.assert_frame_equal(local.drop(columns=list(TIMING_COLUMNS)),
                                      remote.drop(columns=list(TIMING_COLUMNS)), obj=str(relative))
        rollouts = relative.with_name("rollouts.parquet")
        if (smoke_results / rollouts).exists():
            pd.testing.assert_frame_equal(pd.read_parquet(smoke_results / rollouts),
                                          pd.read_parquet(on_slurm / rollouts), obj=str(rollouts))
    evaluations = sorted(path.relative_to(smoke_results) for path in (smoke_results / "eval").rglob("step*.json"))
    assert evaluations
    for relative in evaluations:
        local, remote = (json.loads((root / relative).read_text()) for root in (smoke_results, on_slurm))
        for record in (local, remote):
            for key in EVALUATION_BOOKKEEPING:
                record.pop(key, None)
        assert local == remote, relative
