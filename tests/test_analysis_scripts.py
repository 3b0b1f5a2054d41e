"""Every script under analysis/ runs on a SYNTHETIC results tree and writes what it promises.

The numbers are made up (tests/analysis_synthetic.py); these tests check wiring, file contents and the
direction of statistics whose answer the synthetic curves fix, never the study's results.
"""

import runpy
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dara.analysis import palette
from test_analysis_synthetic import run_script, write_synthetic_results

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return write_synthetic_results(tmp_path_factory.mktemp("results"))


def test_first_crossing_table_and_summary(results):
    run_script("first_crossing", results, evals=False)
    table = pd.read_csv(results / "tables/first_crossing.csv")
    # the warm start comes from each run's own record (0 in the synthetic tree, whose runs record none)
    assert list(table.columns) == ["task", "method", "G", "seed", "warm_start", "reward", "threshold", "step",
                                   "last_step"]
    assert set(table["task"]) == {"toolcall", "toolcall3", "math_length", "act_critic"}
    format_08 = table[(table["task"] == "toolcall") & (table["reward"] == "format") & (table["G"] == 8)]
    never = format_08[(format_08["method"] == "gdpo") & (format_08["seed"] == 2)]
    assert never["step"].isna().all()  # kept as a row with an empty step, not dropped
    medians = format_08.groupby("method")["step"].median()
    assert medians["dara_asym"] < medians["gdpo"] < medians["grpo"]
    summary = (results / "tables/first_crossing.md").read_text()
    assert "never" in summary and "tiny scale" in summary


@pytest.mark.parametrize("name, outputs", [
    ("dynamics", ["figures/dynamics_toolcall.png", "figures/dynamics_act_critic.pdf"]),
    ("fig1b", ["figures/fig1b.png", "figures/fig1b.pdf", "figures/fig1b.csv"]),
    ("fig3", ["figures/fig3.png", "figures/fig3.csv"]),
    ("fig4", ["figures/fig4.png", "figures/fig4.csv"]),
    ("fig5", ["figures/fig5.png", "figures/fig5.csv"]),
    ("survival", ["figures/survival.png", "tables/survival.csv"]),
    ("fig2", ["figures/fig2.png", "figures/fig2.pdf", "figures/fig2.csv"]),
    ("fig6", ["figures/fig6.png", "figures/fig6.csv"]),
    ("table4b", ["tables/table4b.md"]),
])
def test_figure_scripts_write_png_pdf_and_data(results, name, outputs):
    run_script(name, results)
    for output in outputs:
        assert (results / output).stat().st_size > 0, output


def test_survival_table_censors_and_compares_with_gdpo(results):
    run_script("survival", results, evals=False)
    table = pd.read_csv(results / "tables/survival.csv").set_index("method")
    assert table.loc["gdpo", "n_runs"] == 3 and table.loc["gdpo", "n_crossed"] == 2
    assert table.loc["dara_asym", "km_median"] < table.loc["gdpo", "km_median"]
    assert 0 <= table.loc["dara_asym", "logrank_p"] <= 1
    assert pd.isna(table.loc["gdpo", "logrank_p"])


def test_fig5_records_status_per_threshold(results):
    run_script("fig5", results, evals=False)
    records = pd.read_csv(results / "figures/fig5.csv")
    assert set(records["threshold"]) == {0.8, 0.9, 0.95, 0.99}
    assert set(records["status"]) <= {"confirmed", "pending", "not_reached"}
    # synthetic length curves plateau at 0.97: never stable at 0.99, confirmed at 0.8
    assert (records.loc[records["threshold"] == 0.99, "status"] != "confirmed").all()
    dara = records[records["method"].str.startswith("dara")]
    assert (dara.loc[dara["threshold"] == 0.8, "status"] == "confirmed").all()
    # tiny scale reads the paper's span (its 80-step math runs hold it): a 10-step window held 20 more
    assert set(records["run_length"]) == {60} and set(records["window"]) == {10} and set(records["future"]) == {20}


def test_table1_all_runs_retained_runs_and_base(results):
    run_script("table1", results)
    table = pd.read_csv(results / "tables/table1.csv")
    assert set(table["cohort"]) == {"step 0 (base policy)", "all runs", "retained"}
    assert set(table["model"]) == {"tiny"} and set(table["G"]) == {8}
    cohort = table[(table["cohort"] == "all runs") & (table["metric"] == "average_format")].set_index("method")
    # synthetic format at step 60 is ~0.97 except the GDPO seed that never learns it (~0.02): 3 runs, big SD
    assert cohort.loc["gdpo", "n"] == 3 and cohort.loc["gdpo", "sd"] > 30
    retained = table[(table["cohort"] == "retained") & (table["metric"] == "average_format")].set_index("method")
    assert retained.loc["gdpo", "n"] == 2 and retained.loc["dara_sym", "n"] == 3
    text = (results / "tables/table1.md").read_text()
    assert "1 of 12 runs dropped" in text and "live_accuracy" in text  # the missing split is named


def test_table2_compares_two_and_three_rewards(results):
    run_script("table2", results)
    table = pd.read_csv(results / "tables/table2.csv")
    assert set(table["n_rewards"]) == {2, 3}
    assert set(table.loc[table["n_rewards"] == 3, "metric"]) == {"average_format", "average_length"}


def test_table4a_has_static_and_dynamic_methods(results):
    run_script("table4a", results)
    table = pd.read_csv(results / "tables/table4a.csv")
    assert set(table["method"]) == {"base", "static_sym", "static_asym", "dara_sym", "dara_asym"}
    assert set(table["metric"]) == {"macro_pass1", "exceed", "joint"}
    assert table["mean"].between(0, 100).all()
    # the base row: every run's step-0 evaluation (4 methods x 3 seeds); the synthetic length reward starts at ~2 %
    base = table[table["method"] == "base"].set_index("metric")
    assert (base["n"] == 12).all() and table["method"].iloc[0] == "base"
    final = table[table["method"] == "dara_asym"].set_index("metric")
    assert base.loc["exceed", "mean"] > final.loc["exceed", "mean"]  # the length reward is learned over training


def markdown_table(text: str, heading: str) -> pd.DataFrame:
    """The first Markdown table after ``heading`` in ``text``, as strings."""
    lines = text.split(heading, 1)[1].splitlines()
    rows = [line for line in lines[next(i for i, line in enumerate(lines) if line.startswith("|")):]]
    rows = rows[:next((i for i, line in enumerate(rows) if not line.startswith("|")), len(rows))]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return pd.DataFrame(cells[2:], columns=cells[0])  # cells[1] is the |---| rule


def build_report(results, reference_dir=REPO / "analysis/reference"):
    for name in ("first_crossing", "table1", "table2", "table4a", "survival", "fig5"):
        run_script(name, results)
    run_script("report_md", results, "--reference-dir", str(reference_dir))
    return (results / "REPORT.md").read_text(), pd.read_csv(results / "tables/claims.csv")


def test_report_puts_the_papers_medians_beside_ours_and_computes_claims(results):
    report, claims = build_report(results)
    comparison = markdown_table(report, "## Steps until the format reward first reaches 0.8").set_index("method")
    paper = pd.read_csv(REPO / "analysis/reference/format_crossing_steps.csv")
    paper_gdpo = paper[(paper["model_size"] == "1.5B") & (paper["method"] == "gdpo")]["step"].median()
    assert float(comparison.loc["GDPO", "paper_km_median"]) == paper_gdpo  # five seeds, all crossed: the middle one
    ours = pd.read_csv(results / "tables/first_crossing.csv")
    ours = ours[(ours["task"] == "toolcall") & (ours["reward"] == "format") & (ours["threshold"] == 0.8) & (ours["G"] == 8)]
    dara_asym = ours.loc[ours["method"] == "dara_asym", "step"]
    assert float(comparison.loc["DARA-Asym", "ours_km_median"]) == dara_asym.median()  # three seeds, all crossed
    # synthetic DARA-Asym crosses first (raw p below 5 %), but three seeds an arm do not survive Holm's correction over
    # the family of claims: the verdict says not significant, with a negative effect
    claim = claims[claims["claim"] == "DARA-Asym reaches format 0.8 on toolcall (G=8) in fewer steps than GDPO"].iloc[0]
    assert claim["direction"] == 1 and claim["p_raw"] < 0.05 < claim["p_holm"]
    assert claim["verdict"] == "not significant"
    gdpo = ours[ours["method"] == "gdpo"]
    gdpo_steps = gdpo["step"].fillna(gdpo["last_step"] + 1)  # the never-crossing seed counts from its last step + 1
    assert claim["median_difference"] == dara_asym.median() - gdpo_steps.median()
    assert claim["ci_low"] <= claim["median_difference"] <= claim["ci_high"] < 0
    assert "Table 4b" in report and "Not reproduced" in report
    # Table 4a names the checkpoint it reads: the tiny scale's eighth (experiments/tiny.yaml's analysis block) of the
    # 60-step synthetic runs is 7.5, nearer the checkpoint at 10 than the one at 0
    assert "Ours at step 10, the checkpoint nearest 0.125 of the run." in report
    # fig5's table says how many seeds confirmed each threshold, beside the median they give
    stable = markdown_table(report, "## First stable crossing of the length reward (fig5)")
    records = pd.read_csv(results / "figures/fig5.csv")
    for _, row in stable.iterrows():
        own = records[(records["method"].map(palette.label) == row["method"])
                      & np.isclose(records["threshold"], float(row["threshold"]))]
        assert row["confirmed"] == f"{int(own['step'].notna().sum())}/{len(own)}"
    # the denser-regime section is always written; without runs of the dense task it says what is missing
    assert "## The denser regime (beyond the paper)" in report
    regime = pd.read_csv(results / "tables/denser_regime.csv")
    assert regime["regime"].tolist() == ["sparse", "dense"] and regime["task"].tolist() == ["toolcall", "toolcall_dense"]
    assert regime["contrast_verdict"].iloc[0] == "not testable (no runs of both arms on toolcall_dense)"
    assert (results / "tables/denser_regime.md").read_text() in report
    # every claim names reference rows, in a file that exists
    for reference in claims["reference"]:
        assert (REPO / "analysis/reference" / reference.split(" [")[0]).is_file(), reference


def test_a_corrected_reference_row_reaches_the_report(results, tmp_path):
    reference = tmp_path / "reference"
    shutil.copytree(REPO / "analysis/reference", reference)
    steps = pd.read_csv(reference / "format_crossing_steps.csv")
    steps.loc[(steps["model_size"] == "1.5B") & (steps["method"] == "gdpo"), "step"] = [40, 41, 42, 43, 44]
    steps.to_csv(reference / "format_crossing_steps.csv", index=False)
    final = pd.read_csv(reference / "bfcl_v4_final.csv")
    final.loc[(final["model_size"] == "1.5B") & (final["method"] == "dara_sym")
              & (final["metric"] == "average_accuracy"), "mean"] = 12.34
    final.to_csv(reference / "bfcl_v4_final.csv", index=False)

    report, claims = build_report(results, reference)
    comparison = markdown_table(report, "## Steps until the format reward first reaches 0.8").set_index("method")
    assert float(comparison.loc["GDPO", "paper_km_median"]) == 42
    crossing = claims[claims["claim"].str.startswith("DARA-Asym reaches format 0.8") & claims["claim"].str.endswith("GDPO")]
    assert "1.5B: Kaplan-Meier median of its per-seed steps 14 vs 42 (seeds" in crossing["paper"].iloc[0]
    accuracy = claims[claims["claim"] == "DARA-Sym's final held-out accuracy is not lower than GDPO's"].iloc[0]
    assert accuracy["paper"].endswith("12.34 vs 50.37 (1.5B), 54.15 vs 53.66 (3B)")
    table1 = markdown_table(report, "## Table 1:")
    row = table1[(table1["method"] == "DARA-Sym") & (table1["metric"] == "average_accuracy")].iloc[0]
    assert float(row["paper"]) == 12.34 and float(row["difference"]) == round(float(row["ours"]) - 12.34, 2)


def test_survival_figure_and_table_carry_the_effect_sizes(results):
    run_script("survival", results, evals=False)
    table = pd.read_csv(results / "tables/survival.csv").set_index("method")
    assert table.loc["dara_asym", "median_difference"] < 0
    assert table.loc["dara_asym", "ci_low"] <= table.loc["dara_asym", "median_difference"] <= table.loc["dara_asym", "ci_high"]
    assert pd.isna(table.loc["gdpo", "median_difference"])  # the baseline against itself


def _without_irrelevance(results, tmp_path, runs):
    """The synthetic tool evaluations, with bfcl_accuracy_irrelevance NaN (as dara.evaluation.tiny_heldout writes it for
    held-out items without a no-tool case) in the runs for which ``runs(path)`` is true."""
    import json

    copy = tmp_path / "tiny"
    shutil.copytree(results / "eval" / "toolcall", copy / "eval" / "toolcall")
    for path in copy.glob("eval/toolcall/**/step*.json"):
        if runs(path):
            record = json.loads(path.read_text())
            record["metrics"]["bfcl_accuracy_irrelevance"] = float("nan")
            path.write_text(json.dumps(record))  # NaN, as json.dump writes it
    return copy


def test_table1_leaves_out_a_metric_no_evaluation_measured_and_says_so(results, tmp_path):
    copy = _without_irrelevance(results, tmp_path, lambda path: True)
    run_script("table1", copy, metrics=False)
    table = pd.read_csv(copy / "tables/table1.csv")
    assert "irrelevance_accuracy" not in set(table["metric"])
    assert {"average_accuracy", "average_format", "accuracy_with_irrelevance"} <= set(table["metric"])
    assert set(table["cohort"]) == {"step 0 (base policy)", "all runs", "retained"}
    text = (copy / "tables/table1.md").read_text()
    assert "Not measured on these held-out items: irrelevance_accuracy" in text


def test_table1_refuses_a_metric_only_some_evaluations_lack(results, tmp_path):
    copy = _without_irrelevance(results, tmp_path, lambda path: "seed0" in path.parts)
    with pytest.raises(ValueError, match="missing 'irrelevance_accuracy'"):
        run_script("table1", copy, metrics=False)


def test_regime_table_measures_step0_shares_weights_and_drift(results):
    run_script("regime", results)
    table = pd.read_csv(results / "tables/regime.csv")
    assert set(table.loc[table["table"] == "step0", "task"]) == {"toolcall", "toolcall3", "math_length", "act_critic"}
    assert set(table.loc[table["table"] == "heldout", "task"]) >= {"toolcall", "math_length"}
    assert "The regime of each task" in (results / "tables/regime.md").read_text()


def test_regime_numbers_on_constructed_runs():
    regime = runpy.run_path(str(REPO / "analysis" / "regime.py"))
    rows = []
    # three seeds of GDPO and DARA-Sym on one task at G=4; step 0 shares one policy per seed
    for seed, (density, weight, format_energy) in enumerate([(0.04, 4.5, 3.0), (0.08, 3.2, 6.0), (0.0, 1.0, 0.0)]):
        for method in ("gdpo", "dara_sym"):
            for step in range(6):
                rows.append({"task": "toolcall", "method": method, "G": 4, "seed": seed, "step": step,
                             "density/format": density if step == 0 else 0.5, "density/correctness": 0.7,
                             "weight/format": weight if method == "dara_sym" else 1.0, "weight/correctness": 1.0,
                             "energy_pos/format": format_energy / 2, "energy_neg/format": format_energy / 2,
                             "energy_pos/correctness": 27.0 / 2, "energy_neg/correctness": 27.0 / 2})
    step0 = {row["reward"]: row for row in regime["step0_rows"]("toolcall", pd.DataFrame(rows))}
    assert step0["format"]["density_step0"] == pytest.approx(0.04)
    assert step0["format"]["dara_weight_step0"] == pytest.approx(3.2)
    assert step0["format"]["gdpo_energy_share_step0"] == pytest.approx(3.0 / 30.0)  # seed 0's 3 / (3 + 27)
    assert step0["correctness"]["gdpo_energy_share_step0"] == pytest.approx(27.0 / 30.0)
    evaluations = pd.DataFrame([
        {"task": "toolcall", "method": method, "G": 4, "seed": seed, "step": step, "metrics/acc": value}
        for seed in range(3)
        for method, final in (("shuffled", 0.18 + 0.01 * seed), ("gdpo", 0.5))
        for step, value in ((0, 0.2), (30, final))])
    heldout = {row["method"]: row for row in regime["heldout_rows"]("toolcall", "metrics/acc", evaluations)}
    assert heldout["shuffled"]["base"] == pytest.approx(20.0)
    assert heldout["shuffled"]["final_median"] == pytest.approx(19.0)
    assert heldout["shuffled"]["median_minus_base"] == pytest.approx(-1.0)
    assert heldout["gdpo"]["median_minus_base"] == pytest.approx(30.0)
    # warm starts with different bases: each run's gain is against its own warm start's base, and the base shown
    # weights each warm start alike (three runs on warm start 0 at 20 %, one on warm start 1 at 60 %)
    spread = pd.DataFrame([
        {"task": "toolcall", "method": "gdpo", "G": 4, "seed": seed, "warm_start": warm_start, "step": step,
         "metrics/acc": value}
        for seed, warm_start, base, final in ((0, 0, 0.2, 0.3), (1, 0, 0.2, 0.3), (2, 0, 0.2, 0.3), (3, 1, 0.6, 0.7))
        for step, value in ((0, base), (30, final))])
    (gdpo,) = regime["heldout_rows"]("toolcall", "metrics/acc", spread)
    assert gdpo["base"] == pytest.approx(40.0) and gdpo["median_minus_base"] == pytest.approx(10.0)


def test_regime_control_rows_compare_first_and_last_training_rewards():
    regime = runpy.run_path(str(REPO / "analysis" / "regime.py"))
    rows = [{"task": "act_critic", "method": method, "G": 8, "seed": seed, "step": step,
             "reward/accuracy": (0.1 + 0.02 * step * (method == "gdpo")) + 0.01 * seed, "reward/sum": 0.0}
            for method in ("gdpo", "shuffled", "dara_sym") for seed in range(3) for step in range(11)]
    found = {(row["method"], row["reward"]): row for row in regime["control_rows"]("act_critic", pd.DataFrame(rows))}
    assert set(found) == {("gdpo", "accuracy"), ("shuffled", "accuracy")}  # reward/sum and other methods left out
    assert found[("shuffled", "accuracy")]["step0"] == pytest.approx(0.11)
    assert found[("shuffled", "accuracy")]["last"] == pytest.approx(0.11)
    assert found[("gdpo", "accuracy")]["last"] == pytest.approx(0.31)


def _runs_of(results, task):
    """Every synthetic run of ``task`` read from its own files (not through the analysis loaders): one frame of
    metrics rows with the run's coordinates from its folder names."""
    frames = []
    for path in sorted(results.glob(f"runs/{task}/*/G*/seed*/metrics.parquet")):
        seed_dir, g_dir, method_dir = path.parent, path.parent.parent, path.parent.parent.parent
        frames.append(pd.read_parquet(path).assign(method=method_dir.name, G=int(g_dir.name[1:]),
                                                   seed=int(seed_dir.name[4:])))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("name, task", [("fig1b", "toolcall"), ("fig4", "math_length")])
def test_seed_band_figures_hold_the_median_and_quartiles_of_the_runs_at_the_main_group_size(results, name, task):
    import numpy as np

    run_script(name, results)
    plotted = pd.read_csv(results / f"figures/{name}.csv")
    if "task" in plotted.columns:
        plotted = plotted[plotted["task"] == task]
    runs = _runs_of(results, task)
    per_g = runs[["method", "G", "seed"]].drop_duplicates()["G"].value_counts()
    main_g = min(g for g, n in per_g.items() if n == per_g.max())
    runs = runs[(runs["G"] == main_g) & (runs["step"] >= 1)]
    assert set(plotted["quantity"]) >= {f"reward/{'format' if task == 'toolcall' else 'length'}"}
    checked = 0
    for row in plotted.itertuples():
        values = runs.loc[(runs["method"] == row.method) & (runs["step"] == row.step), row.quantity].dropna()
        assert len(values) == row.n_seeds > 0, row
        q25, median, q75 = np.percentile(values.to_numpy(), [25, 50, 75])
        assert (row.q25, row.median, row.q75) == pytest.approx((q25, median, q75)), row
        checked += 1
    # every method and step of the main G is plotted, and nothing else
    assert checked == len(plotted) and set(plotted["method"]) == set(runs["method"])
    assert set(plotted["step"]) == set(runs["step"])


def test_fig3_marks_each_runs_first_format_crossing(results):
    run_script("fig3", results)
    marked = pd.read_csv(results / "figures/fig3.csv")
    runs = _runs_of(results, "toolcall")
    runs = runs[runs["step"] >= 1]
    assert len(marked) == len(runs[["method", "G", "seed"]].drop_duplicates())
    for row in marked.itertuples():
        run = runs[(runs["method"] == row.method) & (runs["G"] == row.G) & (runs["seed"] == row.seed)]
        crossed = run.loc[run["reward/format"] >= row.threshold, "step"]
        expected = crossed.min() if len(crossed) else None
        assert (pd.isna(row.step) and expected is None) or row.step == expected, row
        assert row.last_step == run["step"].max()
    assert marked["step"].isna().any() and marked["step"].notna().any()  # the synthetic tree has both kinds


@pytest.mark.parametrize("name, task, columns", [
    ("fig2", "toolcall", {"average_accuracy": "bfcl_accuracy_tool", "average_format": "bfcl_format"}),
    ("fig6", "math_length", {"macro_pass1": "accuracy", "exceed": "exceed"}),
])
def test_checkpoint_figures_hold_each_runs_evaluation(results, name, task, columns):
    import json

    run_script(name, results)
    plotted = pd.read_csv(results / f"figures/{name}.csv")
    assert len(plotted) and set(plotted["task"]) == {task}
    assert set(columns) <= set(plotted.columns)
    for row in plotted.to_dict("records"):
        record = json.loads((results / f"eval/{task}/{row['method']}/G{row['G']}/seed{row['seed']}/"
                                       f"step{row['step']}.json").read_text())
        for paper_name, key in columns.items():
            assert row[paper_name] == pytest.approx(record["metrics"][key]), (row, paper_name)
    # one G (the task's main one), every evaluated checkpoint of its runs
    assert plotted["G"].nunique() == 1
    assert len(plotted) == len(list(results.glob(f"eval/{task}/*/G{plotted['G'].iloc[0]}/seed*/step*.json")))


def test_regime_late_rows_read_each_runs_last_third_and_middle_step():
    regime = runpy.run_path(str(REPO / "analysis" / "regime.py"))
    # 31 steps per run (last third: 21..30). GDPO seed s: length varies in 1 group of 12 on steps 21..30 when s = 0,
    # in 3 of 12 when s = 1, and in none when s = 2; correctness in 9 of 12 throughout
    rows = [{"task": "math_length", "method": "gdpo", "G": 8, "seed": seed, "step": step,
             "reward/length": 0.5 + 0.01 * step + 0.1 * seed, "reward/correctness": 0.7,
             "density/length": ((1, 3, 0)[seed] / 12) if step > 20 else 0.8, "density/correctness": 0.75}
            for seed in range(3) for step in range(31)]
    (length, correctness) = sorted(regime["late_rows"]("math_length", pd.DataFrame(rows), 5.0),
                                   key=lambda row: row["reward"] != "length")
    assert length["reward"] == "length" and length["seeds"] == 3
    assert length["density_last_third"] == pytest.approx(1 / 12)  # median of 1/12, 3/12, 0
    assert length["active_last_third"] == pytest.approx(1.0)  # median of 1, 1, 0
    # seed 0's weight sqrt(0.75 / (1/12)) = 3, seed 1's sqrt(3) = 1.73, seed 2 never varies (NaN, left out)
    assert length["weight_last_third"] == pytest.approx((3 + 3 ** 0.5) / 2)
    assert length["mean_middle_step"] == pytest.approx(0.5 + 0.15 + 0.1)  # step 15 of seed 1
    assert correctness["weight_last_third"] == 1.0 and correctness["density_last_third"] == pytest.approx(0.75)
    assert regime["late_rows"]("math_length", pd.DataFrame(rows)[lambda f: f["step"] < 2], 5.0) == []


def test_table4a_reads_the_checkpoint_nearest_its_share_of_the_run():
    table4a = runpy.run_path(str(REPO / "analysis" / "table4a.py"))
    every20 = pd.DataFrame({"step": [0, 20, 40, 60, 80]})
    assert table4a["compared_step"](every20, 0.25) == 20  # the paper's step 50 of 200, at 80 steps
    assert table4a["compared_step"](every20, 1.0) == 80  # the final checkpoint
    assert table4a["compared_step"](every20, 0.01) == 20  # never the base at step 0
    # a quarter of 60 is 15, halfway between the checkpoints at 10 and 20: the later one
    assert table4a["compared_step"](pd.DataFrame({"step": [0, 10, 20, 30, 40, 50, 60]}), 0.25) == 20
