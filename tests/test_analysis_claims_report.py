"""From the scripts' tables to the claims: table1.py and table4a.py write the per-run final scores the "not lower"
claims test, and report_md.py reads them, with and without warm starts, on a SYNTHETIC results tree
(tests/test_analysis_synthetic.py; the numbers are made up, the wiring is what is checked)."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from test_analysis_synthetic import run_script, write_synthetic_results

TOOL_METRICS = ["average_accuracy", "average_format", "accuracy_with_irrelevance", "irrelevance_accuracy"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = write_synthetic_results(tmp_path_factory.mktemp("results"))
    for name in ("first_crossing", "table1", "table4a"):
        run_script(name, root, metrics=name == "first_crossing", evals=name != "first_crossing")
    return root


def test_table1_shows_every_tool_metric_of_the_config_and_writes_the_per_run_values(results):
    text = (results / "tables/table1.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| method"))
    assert [cell.strip() for cell in header.strip("|").split("|")] == ["method", *TOOL_METRICS]
    runs = pd.read_csv(results / "tables/table1_runs.csv")
    # the loaders give every run its warm start (0 in this tree: its runs record none)
    assert runs.columns.tolist() == ["model", "task", "method", "G", "seed", "warm_start", "step", *TOOL_METRICS]
    assert set(runs["warm_start"]) == {0}
    # the main G (8): four methods x three seeds at the last checkpoint, and each run's step 0 as "base"
    assert set(runs["G"]) == {8} and len(runs) == 2 * 12
    final = runs[runs["method"] != "base"]
    assert set(final["step"]) == {60} and len(final) == 12 and (runs.loc[runs["method"] == "base", "step"] == 0).all()
    # in percent, as the summary: its mean over the runs is table1.csv's
    summary = pd.read_csv(results / "tables/table1.csv")
    gdpo = summary[(summary["cohort"] == "all runs") & (summary["method"] == "gdpo")].set_index("metric")["mean"]
    assert final.loc[final["method"] == "gdpo", TOOL_METRICS].mean().to_dict() == pytest.approx(gdpo.to_dict())


def test_table4a_writes_the_per_run_values(results):
    runs = pd.read_csv(results / "tables/table4a_runs.csv")
    assert runs.columns.tolist() == ["task", "method", "G", "seed", "warm_start", "step", "macro_pass1", "exceed",
                                     "joint"]
    assert set(runs["method"]) == {"base", "static_sym", "static_asym", "dara_sym", "dara_asym"}
    assert len(runs) == 2 * 12 and runs[["macro_pass1", "exceed", "joint"]].stack().between(0, 100).all()


def _report(results):
    run_script("report_md", results, evals=False)
    return (results / "REPORT.md").read_text(), pd.read_csv(results / "tables/claims.csv")


def test_report_tests_the_per_run_tables_and_shows_raw_and_holm_p(results):
    report, claims = _report(results)
    for column in ("p_raw", "p_holm", "ci_low", "ci_high", "bound", "per_warm_start", "warm_starts", "verdict"):
        assert column in claims.columns
    assert set(claims["verdict"]) <= {"supported", "refuted", "not significant", "inconclusive", "not informative",
                                      "not testable"}
    irrelevance = claims[claims["claim"] == "DARA-Sym's final held-out irrelevance accuracy is not lower than GDPO's"]
    assert len(irrelevance) == 1 and "margin 15;" in irrelevance["ours"].iloc[0]
    # the regime check is a line of REPORT.md, not a claim
    assert not claims["claim"].str.contains("up-weights").any()
    assert "Regime check (not a claim" in report and "DARA up-weights it (w > 1): **holds**" in report
    assert "| p (raw)" in report and "| p (Holm)" in report and "Non-inferiority margins" in report
    # synthetic DARA-Asym crosses first in all three seeds: significant alone, not after Holm over the family
    crossing = claims[claims["claim"] == "DARA-Asym reaches format 0.8 on toolcall (G=8) in fewer steps than GDPO"]
    row = crossing.iloc[0]
    assert row["direction"] == 1 and row["p_raw"] < 0.05 < row["p_holm"] and row["verdict"] == "not significant"
    assert row["warm_starts"] == 1 and "1 warm start shared" in row["ours"]


def test_report_compares_within_warm_starts_when_the_tables_carry_them(results, tmp_path):
    copy = tmp_path / "tiny"
    shutil.copytree(results / "tables", copy / "tables")
    for name in ("first_crossing.csv", "table1_runs.csv", "table4a_runs.csv"):
        table = pd.read_csv(copy / "tables" / name)
        table["warm_start"] = table["seed"] % 2  # seeds 0 and 2 from warm start 0, seed 1 from warm start 1
        table.to_csv(copy / "tables" / name, index=False)
    claims = pd.read_csv(_report_of(copy))
    crossing = claims[claims["claim"] == "DARA-Asym reaches format 0.8 on toolcall (G=8) in fewer steps than GDPO"]
    assert crossing["warm_starts"].iloc[0] == 2 and crossing["per_warm_start"].iloc[0].startswith("ws0 ")
    accuracy = claims[claims["claim"] == "DARA-Sym's final held-out accuracy is not lower than GDPO's"].iloc[0]
    assert accuracy["warm_starts"] == 2 and "t with 1 df" in accuracy["ours"]


def _report_of(results) -> Path:
    run_script("report_md", results, metrics=False, evals=False)
    return results / "tables/claims.csv"
