"""Shared fixtures. The smoke pipeline runs once per session, for every test that reads its results."""

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory) -> Path:
    """results/smoke after `snakemake --cores 2 --config scale=smoke` (incremental: an up-to-date tree is reused).

    Under pytest-xdist each worker is a session of its own: the first to get here runs the workflow while the others
    wait on a lock in the run's shared temporary folder, then find the tree up to date."""
    snakemake = Path(sys.executable).with_name("snakemake")
    with open(tmp_path_factory.getbasetemp().parent / "smoke_results.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run([str(snakemake), "--cores", "2", "--config", "scale=smoke"], cwd=ROOT,
                                capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return ROOT / "results" / "smoke"


@pytest.fixture(scope="session")
def toy_act_critic_policy(tmp_path_factory):
    """(tokenizer, model) of a small act_critic policy (options {"tag_rate": 0.5}), briefly trained: its responses'
    lengths vary, so padding is exercised (the benchmarks' tests time it at toy sizes)."""
    import torch

    from dara.tiny.policy import load_policy
    from dara.tiny.warmstart import warm_start
    from experiment_defaults import small_warm_start

    torch.set_num_threads(1)
    policy = tmp_path_factory.mktemp("policy") / "act_critic"
    warm_start("act_critic", {"tag_rate": 0.5}, policy, **small_warm_start(
        sft_steps=20, sft_batch_size=8, probe_prompts=2, probe_group_size=2, max_new_tokens=12))
    return load_policy(policy)


# The longest test (verl's end-to-end run, about 4.5 minutes) is collected first, so that under pytest-xdist (make test
# runs two workers) it overlaps the rest of the suite instead of running alone at its end.
FIRST_MODULES = ("test_verl_cpu_e2e.py",)
# Every test that reads the smoke pipeline's results goes to one worker as one group (make test: --dist loadgroup,
# which hands out the largest group first), so that worker starts with the pipeline (about 5 minutes) while the
# other starts with verl's run. Spread over both, the second to need the pipeline waited on the first (131 s).
SMOKE_GROUP = "smoke_results"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.path.name not in FIRST_MODULES)  # stable: the rest keep their order
    for item in items:
        if "smoke_results" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(SMOKE_GROUP))
