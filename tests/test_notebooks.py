"""The analysis notebooks (jupytext percent files) execute top to bottom on a results tree.

Always on a SYNTHETIC tree the test writes (tests/test_analysis_synthetic.py), and on results/smoke, which the
session fixture `smoke_results` (tests/conftest.py) produces by running the smoke pipeline.
"""

import os
from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

from test_analysis_synthetic import write_synthetic_results

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "analysis/notebooks").glob("*.py"))


def execute(notebook_path: Path, results: Path | str, folder: Path = REPO) -> None:
    """Run the notebook with its kernel in ``folder`` (JupyterLab: the notebook's own folder)."""
    notebook = jupytext.read(notebook_path)
    previous = os.environ.get("DARA_RESULTS")
    os.environ["DARA_RESULTS"] = str(results)  # the kernel inherits the environment
    try:
        # kernel "python3" is ipykernel's own spec: it runs this interpreter (.venv's python)
        NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        if previous is None:
            os.environ.pop("DARA_RESULTS")
        else:
            os.environ["DARA_RESULTS"] = previous


def test_there_are_notebooks():
    assert {path.name for path in NOTEBOOKS} >= {"training_dynamics.py", "tables_and_claims.py"}


@pytest.fixture(scope="module")
def synthetic_results(tmp_path_factory):
    return write_synthetic_results(tmp_path_factory.mktemp("synthetic") / "tiny", n_steps=30, seeds=(0, 1))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_on_synthetic_results(notebook, synthetic_results):
    execute(notebook, synthetic_results)


def test_notebook_opened_in_its_folder_reads_results_relative_to_the_repository(synthetic_results):
    # as `make notebooks` runs it: the kernel starts in analysis/notebooks, DARA_RESULTS is relative to the root
    execute(REPO / "analysis/notebooks/training_dynamics.py", os.path.relpath(synthetic_results, REPO),
            folder=REPO / "analysis/notebooks")


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_on_smoke_results(notebook, smoke_results):
    execute(notebook, smoke_results)
