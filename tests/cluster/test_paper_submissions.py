"""Every paper-scale job, submitted as snakemake-executor-plugin-slurm would submit it, is accepted by a real
slurmctld (`sbatch --test-only`) whose GPU partition has the study's node shape (tests/cluster/local_slurm.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from local_slurm import write_test_profile

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


class Resources(dict):
    """A job's resources as the plugin reads them: `.get(name)` and `.name`."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class PlannedJob:
    """One job of a dry run: what the plugin's submit string is built from."""

    name: str
    threads: int
    resources: Resources = field(hash=False)

    def is_group(self) -> bool:
        return False


def planned_jobs(plan: str) -> list[PlannedJob]:
    """The jobs of `snakemake -n` output that go to the cluster (local rules stay on the submitting host)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", plan):
        header = re.match(r"(local)?rule (\S+):\n", block)
        if header is None or header.group(1):
            continue
        threads = re.search(r"^\s+threads: (\d+)$", block, flags=re.MULTILINE)
        line = re.search(r"^\s+resources: (.*)$", block, flags=re.MULTILINE)
        resources = Resources()
        for part in (line.group(1).split(", ") if line else []):
            key, value = part.split("=", 1)
            if value != "<TBD>":
                resources[key] = int(value) if value.isdigit() else value
        jobs.append(PlannedJob(header.group(2), int(threads.group(1)) if threads else 1, resources))
    return jobs


def submit_call(job: PlannedJob) -> str:
    """The sbatch call the plugin makes for ``job`` (its own get_submit_command and set_gres_string; account and
    partition formatted as its get_account_arg / get_partition_arg do), without the job's command."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    for site in ("slurm_account", "slurm_partition"):
        if not job.resources.get(site):
            raise AssertionError(f"{job.name}: no {site} in its resources (the profile's site lines did not reach it)")
    params = {"run_uuid": "test-only", "slurm_logfile": "/dev/null", "comment_str": "test-only",
              "account": f" -A {shlex.quote(str(job.resources.slurm_account))}",
              "partition": f" -p {job.resources.slurm_partition}", "workdir": str(REPO)}
    return get_submit_command(job, params) + set_gres_string(job)


def refused_submissions(cluster, jobs: list[PlannedJob]) -> dict[str, str]:
    """Job name -> the controller's reason, for every job `sbatch --test-only` refuses (one call per distinct
    submission; the jobs that share it share its verdict)."""
    by_call: dict[str, list[str]] = {}
    for job in jobs:
        by_call.setdefault(submit_call(job), []).append(job.name)
    refused = {}
    for call, names in by_call.items():
        test_call = call.replace("sbatch --parsable ", "sbatch --test-only ", 1) + " --wrap true"
        result = cluster.run("bash", "-c", test_call, check=False)
        if result.returncode != 0:
            refused.update({name: f"{result.stderr.strip()} [{test_call}]" for name in names})
    return refused


@pytest.fixture(scope="module")
def paper_jobs(slurm_cluster, tmp_path_factory) -> list[PlannedJob]:
    if not SNAKEMAKE.exists():
        pytest.skip("snakemake is not installed in this environment")
    profile = write_test_profile(tmp_path_factory.mktemp("profile"), partition="gpu")
    # the user's command line, with the test profile: profiles/default joins it as the workflow profile
    result = subprocess.run([str(SNAKEMAKE), "-n", "--config", "scale=paper", "--profile", str(profile)],
                            cwd=REPO, capture_output=True, text=True, timeout=600,
                            env={**os.environ, **slurm_cluster.env()})
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return planned_jobs(result.stdout)


def test_every_paper_job_passes_the_controllers_test_submission(slurm_cluster, paper_jobs):
    names = [job.name for job in paper_jobs]
    assert sum(name.startswith("train_") for name in names) == 134  # every training run of the study
    for rule in ("bfcl_generate", "bfcl_score", "math_generate", "math_score", "prepare_paper_data"):
        assert rule in names
    assert refused_submissions(slurm_cluster, paper_jobs) == {}


def test_a_training_job_asks_its_models_gpus_on_one_node(paper_jobs):
    seven_b = next(job for job in paper_jobs if job.name == "train_math_length_r1_distill_7b_dara_sym_G16_seed0")
    call = submit_call(seven_b)
    assert "--gres=gpu:a100_80gb:8" in call and "--nodes=1" in call and "--cpus-per-task=64" in call
    assert "--mem 480000" in call and "-t 4320" in call and " -p gpu" in call and " -A dara" in call


def test_a_job_the_cluster_cannot_hold_is_reported_by_name(slurm_cluster, paper_jobs):
    tool = next(job for job in paper_jobs if job.name.startswith("train_toolcall_qwen25_15b_"))
    too_many_gpus = replace(tool, name="too_many_gpus",
                            resources=Resources({**tool.resources, "gres": "gpu:a100_40gb:9"}))
    other_model = replace(tool, name="other_gpu_model",
                          resources=Resources({**tool.resources, "gres": "gpu:h100:4"}))
    refused = refused_submissions(slurm_cluster, [tool, too_many_gpus, other_model])
    assert set(refused) == {"too_many_gpus", "other_gpu_model"}
    assert "Requested node configuration is not available" in refused["too_many_gpus"] \
        or "Invalid generic resource" in refused["too_many_gpus"]
