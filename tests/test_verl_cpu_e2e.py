"""verl's real training loop on CPU, end to end: a 5-step DARA-Asym run of the tiny tool-calling task through
``python -m dara.verl_backend.launch train`` (dara_sync trainer, reference policy, hf rollout), killed mid-run and
resumed. Slow (about 4.5 minutes on 2 cores): each launch starts Ray and verl's workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

pytest.importorskip("verl")
pytest.importorskip("ray")

from verl_cpu_setup import RUN_DIR, ray_processes, ray_processes_left, two_step_experiment

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _logged_steps(log: Path) -> set[int]:
    """Steps in a verl file-logger JSONL (a line being written may be cut: it is skipped)."""
    steps = set()
    for line in (log.read_text().splitlines() if log.exists() else []):
        try:
            steps.add(int(json.loads(line)["step"]))
        except (ValueError, KeyError):
            continue
    return steps


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("verl_cpu")
    return base, two_step_experiment(base)


def _launch(base: Path, experiment: Path, output=subprocess.PIPE) -> subprocess.Popen:
    """The run's job as the workflow starts it, in a session of its own; its output to ``output`` (a pipe: read it
    with communicate; an attempt that is polled and killed writes to a file instead, which cannot fill up)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    from dara.experiments import load_experiment
    from dara.runs import find_run_by_dir

    # as the workflow's job runs it: the run resolved (tests/cluster/test_ray_job.py types --run-dir instead)
    run = find_run_by_dir(load_experiment(experiment), RUN_DIR)
    command = [sys.executable, "-m", "dara.verl_backend.launch", "train", "--run", run.to_json()]
    return subprocess.Popen(command, env=env, cwd=base, stdout=output, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_a_killed_run_resumes_from_verls_checkpoint(setup):
    """One run of 5 steps, killed once it has logged step 3 (mid-training, Ray and its workers with it), then a new
    attempt: it continues from verl's last checkpoint (step 3, or 2 if the kill came before that save), not from the
    start, and the finished run holds every step's metrics, checkpoints and rollout dump. Two launches, not three: a
    completed 2-step run before the kill would test nothing the finished run does not, and each launch starts Ray."""
    from transformers import AutoModelForCausalLM

    base, experiment = setup
    config = yaml.safe_load(experiment.read_text())
    config["settings"]["steps"] = 5  # the shared setting, as verl_cpu.yaml states it
    experiment.write_text(yaml.safe_dump(config))
    before = ray_processes()
    run_dir = base / RUN_DIR
    first_output = base / "attempt1.out"
    with first_output.open("w") as output:
        process = _launch(base, experiment, output)
    first_attempt = run_dir / "verl_logs" / "attempt1.jsonl"
    deadline = time.monotonic() + 600
    try:
        while 3 not in _logged_steps(first_attempt):
            if process.poll() is not None:
                pytest.fail(f"the run exited ({process.returncode}) before step 3:\n"
                            f"{first_output.read_text()[-6000:]}")
            assert time.monotonic() < deadline, "the run never reached step 3"
            time.sleep(0.5)
    finally:  # killed mid-run as the test means to, or left behind by a failed wait: never left running
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert {1, 2, 3} <= _logged_steps(first_attempt)
    assert not (run_dir / "metrics.parquet").exists(), "a killed run left a metrics file that looks complete"
    subprocess.run([str(Path(sys.executable).with_name("ray")), "stop", "--force"], capture_output=True)

    process = _launch(base, experiment)
    output, _ = process.communicate(timeout=900)
    assert process.returncode == 0, output[-6000:]
    logs = sorted((run_dir / "verl_logs").glob("attempt*.jsonl"))
    assert [log.name for log in logs] == ["attempt1.jsonl", "attempt2.jsonl"]
    last_attempt_steps = _logged_steps(logs[-1])
    assert 5 in last_attempt_steps and min(last_attempt_steps) >= 3, last_attempt_steps
    frame = pd.read_parquet(run_dir / "metrics.parquet")
    # verl's steps 1-5 rolled out the policies after 0-4 updates: rows 0-4, as every backend numbers them
    assert frame["step"].tolist() == [0, 1, 2, 3, 4]
    assert frame["verl/training/global_step"].tolist() == [1, 2, 3, 4, 5]
    for column in ("density/format", "density/correctness", "weight/format", "weight/correctness",
                   "reward/format", "reward/correctness"):
        assert column in frame and frame[column].notna().all(), column
    # a barely warm-started policy often scores every response of a group alike (zero advantages); the KL loss to the
    # reference still moves it once the actor has left the reference (step 2)
    assert (frame["verl/actor/grad_norm"] > 0).any()
    # the rollout generated with each step's weights: its log-probs are the actor's
    assert (frame["verl/training/rollout_probs_diff_mean"] < 1e-3).all()
    for step in (1, 2, 5):
        export = run_dir / "checkpoints" / f"step{step}"
        model = AutoModelForCausalLM.from_pretrained(export)
        assert sum(p.numel() for p in model.parameters()) > 0

    # `dara diagnose` on verl's rollout dump (with the group, policy step and reward columns dara_sync adds) finds the
    # densities that the estimator logged for the same rows (the first attempt's steps 1 and 2, which no attempt
    # redid: the kill came after step 2's checkpoint)
    from dara.__main__ import main as dara_main

    dara_main(["diagnose", str(base / "rollouts"), "--group", "group", "--step", "policy_step", "--reward", "format",
               "--reward", "correctness", "--out", str(base / "diagnosis")])
    diagnosed = pd.read_csv(base / "diagnosis" / "diagnostics.csv").set_index(["step", "reward"])
    for _, row in frame[frame["step"] <= 1].iterrows():
        for reward in ("format", "correctness"):
            assert diagnosed.loc[(int(row["step"]), reward), "density"] == pytest.approx(row[f"density/{reward}"])
    assert not ray_processes_left(before), "Ray left processes behind"
