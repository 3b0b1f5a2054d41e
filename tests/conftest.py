"""Shared fixtures. The smoke pipeline runs once per session, for every test that reads its results."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smoke_results() -> Path:
    """results/smoke after `snakemake --cores 2 --config scale=smoke` (incremental: an up-to-date tree is reused)."""
    snakemake = Path(sys.executable).with_name("snakemake")
    result = subprocess.run([str(snakemake), "--cores", "2", "--config", "scale=smoke"], cwd=ROOT,
                            capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return ROOT / "results" / "smoke"
