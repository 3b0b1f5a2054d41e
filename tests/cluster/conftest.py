"""The cluster tests (`make test-cluster`, marker `cluster`, left out of `make test`): one throwaway Slurm cluster
for the session, stopped afterwards also when a test fails, with a check that none of its daemons outlives it."""

from __future__ import annotations

import pytest

from local_slurm import TEST_PARTITIONS, LocalSlurm


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm") / "state", TEST_PARTITIONS)
    with cluster:
        yield cluster
    assert cluster.running() == [], f"cluster daemons still running after stop: {cluster.running()}"
