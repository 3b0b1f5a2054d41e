"""The smoke pipeline end to end: training, evaluation and every analysis artifact, on CPU, in a few minutes."""

import json
import re
import subprocess
import typing
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dara.analysis import claims as claim_rules
from dara.analysis import palette
from dara.experiments import load_experiment
from dara.runs import run_matrix

pytestmark = pytest.mark.slow


def test_every_run_wrote_its_metrics_config_and_revision(smoke_results):
    experiment = load_experiment("smoke")
    runs = run_matrix(experiment)
    assert runs
    for run in runs:
        folder = smoke_results.parents[1] / run.run_dir
        metrics = pd.read_parquet(folder / "metrics.parquet")
        steps = run.settings["steps"]
        assert metrics["step"].tolist() == list(range(steps)), folder  # row s: rollouts of the policy after s updates
        rewards = [c.split("/", 1)[1] for c in metrics.columns if c.startswith("reward/") and c != "reward/sum"]
        assert rewards, folder
        for name in rewards:
            density = metrics[f"density/{name}"].iloc[1:]
            assert density.between(0, 1).all() and (metrics[f"weight/{name}"].iloc[1:] >= 1).all()
        assert (folder / "config.yaml").is_file() and (folder / "git_revision.txt").read_text().strip()


def test_logged_dara_weights_follow_the_logged_densities(smoke_results):
    frames = list((smoke_results / "runs").glob("*/dara_*/G*/seed*/metrics.parquet"))
    assert frames
    for path in frames:
        metrics = pd.read_parquet(path)
        names = [c.split("/", 1)[1] for c in metrics.columns if c.startswith("density/")]
        densities = metrics[[f"density/{n}" for n in names]].to_numpy()
        weights = metrics[[f"weight/{n}" for n in names]].to_numpy()
        reference = densities.max(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            expected = np.where(densities > 0, np.minimum(5.0, np.sqrt(reference / densities)), 1.0)
        np.testing.assert_allclose(weights, expected, rtol=1e-6, err_msg=str(path))


def test_checkpoints_were_evaluated(smoke_results):
    files = sorted((smoke_results / "eval").glob("*/*/G*/seed*/step*.json"))
    assert files
    tasks = set()
    for path in files:
        record = json.loads(path.read_text())
        assert f"step{record['step']}.json" == path.name and record["rewards"]
        tasks.add(record["task"])
    assert {"toolcall", "math_length"} <= tasks


def test_every_artifact_and_the_report_exist(smoke_results):
    for name in ("first_crossing.csv", "first_crossing.md", "table1.md", "table2.md", "table4a.md", "table4b.md"):
        assert (smoke_results / "tables" / name).stat().st_size > 0, name
    for name in ("fig1b", "fig2", "fig3", "fig4", "fig5", "fig6", "survival", "toy"):
        for suffix in (".png", ".pdf"):
            assert (smoke_results / "figures" / f"{name}{suffix}").stat().st_size > 0, name
    crossing = pd.read_csv(smoke_results / "tables" / "first_crossing.csv")
    assert {"task", "method", "G", "seed", "reward", "threshold", "step"} <= set(crossing.columns)


def test_report_claims_follow_the_crossing_table_and_name_existing_reference_rows(smoke_results):
    claims = pd.read_csv(smoke_results / "tables" / "claims.csv")
    assert set(claims["verdict"]) <= set(typing.get_args(claim_rules.Verdict))
    assert set(typing.get_args(claim_rules.Verdict)) == {"supported", "refuted", "not significant", "inconclusive",
                                                         "not informative", "not testable"}
    for reference in claims["reference"]:  # every claim points at rows of a reference table that exists
        assert (Path(__file__).resolve().parents[1] / "analysis/reference" / reference.split(" [")[0]).is_file()
    # every format-crossing claim's effect size, recomputed here from first_crossing.csv: the difference of the
    # two methods' median crossing steps at the claim's group size, never-crossing runs at last step + 1
    crossing = pd.read_csv(smoke_results / "tables" / "first_crossing.csv")
    format_runs = crossing[(crossing["task"] == "toolcall") & (crossing["reward"] == "format")
                           & np.isclose(crossing["threshold"], 0.8)]
    label_to_method = {palette.label(method): method for method in palette.METHOD_ORDER}
    pattern = r"^(.+) reaches format 0\.8 on toolcall \(G=(\d+)\) in fewer steps than (.+)$"
    checked = 0
    for claim in claims.itertuples():
        match = re.match(pattern, claim.claim)
        if match is None:
            continue
        runs = format_runs[format_runs["G"] == int(match[2])]
        arms = [runs[runs["method"] == label_to_method[match[group]]] for group in (1, 3)]
        if any(arm.empty for arm in arms):
            assert claim.verdict == "not testable"
            continue
        if not any(arm["step"].notna().any() for arm in arms):  # neither arm crossed: no effect to compute
            assert claim.verdict == "inconclusive" and np.isnan(claim.median_difference)
        else:
            steps = [arm["step"].fillna(arm["last_step"] + 1).median() for arm in arms]
            assert claim.median_difference == steps[0] - steps[1]
            assert claim.ci_low <= claim.median_difference <= claim.ci_high
        checked += 1
    assert checked  # the smoke matrix has at least one pair of methods at one group size


def test_a_second_run_has_nothing_to_do(smoke_results):
    snakemake = [str(Path(sys.executable).with_name("snakemake")), "-n", "--config", "scale=smoke"]
    result = subprocess.run(snakemake, cwd=smoke_results.parents[1], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Nothing to be done" in result.stdout + result.stderr
