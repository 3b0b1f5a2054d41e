"""profiles/slurm/ray_job.sh on a two-node allocation of the local cluster: the Ray head on the first node, a worker
joining from the second, verl's training loop (a 2-step verl_cpu run) joining that Ray cluster; and a failing
command, whose exit status the job keeps and whose Ray nodes are stopped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from verl_cpu_setup import ray_processes, ray_processes_left

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RAY_JOB = REPO / "profiles" / "slurm" / "ray_job.sh"


def run_on_two_nodes(cluster, command: str, workdir: Path, timeout_s: float) -> tuple[str, str]:
    """sbatch ``command`` under ray_job.sh on both nodes of partition cpu, inside an `srun -n1` step as the Slurm
    executor's job step runs a job; returns the job's final state and its output."""
    log = workdir / "job.log"
    env = {**os.environ, **cluster.env(),
           "PATH": f"{cluster.bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           # logical resources for verl's CPU backend (dara.verl_plugin.cpu: one GPU, 16 CPUs)
           "RAY_NUM_CPUS": "16", "RAY_NUM_GPUS": "1"}
    wrapped = f"srun -n1 --cpu-bind=q --cpus-per-task=1 bash {RAY_JOB} {command}"
    job_id = subprocess.run(["sbatch", "--parsable", "-p", "cpu", "--nodes=2", "--ntasks-per-node=1",
                             "--cpus-per-task=1", "--mem=8000", "-o", str(log), "-D", str(workdir),
                             "--wrap", wrapped], env=env, capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.monotonic() + timeout_s
    while True:
        state = cluster.run("sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State").stdout.strip()
        if state and state.split()[0] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"):
            return state.split()[0], log.read_text(errors="replace") if log.exists() else ""
        if time.monotonic() > deadline:
            cluster.run("scancel", job_id, check=False)
            raise AssertionError(f"job {job_id} still {state} after {timeout_s:.0f} s")
        time.sleep(2)


def test_two_verl_steps_on_a_two_node_ray_cluster(slurm_cluster, tmp_path):
    pytest.importorskip("verl")
    from verl_cpu_setup import RUN_DIR, two_step_experiment  # imports dara's verl path: after the skip

    experiment = two_step_experiment(tmp_path)
    before = ray_processes()
    command = f"{sys.executable} -m dara.verl_backend.launch train --experiment {experiment} --run-dir {RUN_DIR}"
    state, output = run_on_two_nodes(slurm_cluster, command, tmp_path, timeout_s=900)
    assert state == "COMPLETED", output[-6000:]
    assert "Ray cluster at " in output and "with 2 nodes (n1 n2)" in output, output[-3000:]
    assert "Connecting to existing Ray cluster" in output  # verl's ray.init() joined it instead of starting one
    frame = pd.read_parquet(tmp_path / RUN_DIR / "metrics.parquet")
    assert frame["step"].tolist() == [0, 1]  # verl steps 1-2: the policies after 0 and 1 updates
    for column in ("density/format", "density/correctness", "weight/format", "reward/correctness"):
        assert frame[column].notna().all(), column
    assert not ray_processes_left(before), "Ray left processes behind"


def test_a_failing_command_fails_the_job_and_stops_ray(slurm_cluster, tmp_path):
    before = ray_processes()
    state, output = run_on_two_nodes(slurm_cluster, "bash -c 'exit 3'", tmp_path, timeout_s=300)
    assert state == "FAILED", output[-3000:]
    assert "with 2 nodes" in output  # Ray was up when the command ran
    assert not ray_processes_left(before), "Ray left processes behind"
