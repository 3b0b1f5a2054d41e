"""results/<scale>/REPORT.md: every regenerated table beside the paper's value and the difference, the
crossing-step comparison, and which of the paper's claims our runs support, computed from the tables the
other analysis scripts wrote (their paths are the rule's inputs: first_crossing.csv, the per-run final scores
table1_runs.csv and table4a_runs.csv, fig5.csv, ...) and analysis/reference/. Every number of the paper in it is
read from analysis/reference/*.csv (dara.analysis.paper_reference), none is typed here.
Also writes results/<scale>/tables/claims.csv: the claims with their effect sizes, raw and Holm-adjusted p-values
and verdicts, for tests and notebooks.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from dara.analysis import claims as claim_checks
from dara.analysis import palette
from dara.analysis.claims import claims_frame, claims_markdown
from dara.analysis.cli import parse_inputs
from dara.analysis.crossing import MEDIAN_NAME, crossing_summary, outcome_records
from dara.analysis.mechanism_toy import ToyConfig
from dara.io import write_text_atomic
from dara.provenance import code_label, git_revision
from dara.analysis.paper_comparison import (crossing_comparison, headline_claims, non_inferiority, paper_model_size,
                                            regime_check, stable_window, table_comparison)
from dara.analysis.paper_reference import PaperReference
from dara.analysis.regimes import regime_contrast, regime_markdown
from dara.analysis.tables import main_group_size
from dara.io import write_csv_atomic


def _read(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    return None if frame.empty else frame


def _label_methods(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(method=[palette.label(m) for m in frame["method"]])


def _measured(merged: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """Rows we measured, and a sentence naming the methods only the paper has."""
    only_paper = sorted(set(merged.loc[merged["ours"].isna(), "method"]) - set(merged.loc[merged["ours"].notna(), "method"]))
    note = f"Only in the paper (not run at this scale): {', '.join(palette.label(m) for m in palette.ordered(only_paper))}." if only_paper else ""
    return merged[merged["ours"].notna()], note


def _verdict_rules(config: dict) -> str:
    """The paragraph above the claims table: how each verdict is reached (dara.analysis.claims has the rules)."""
    significance = f"{claim_checks.SIGNIFICANCE:g}"
    return ("Verdicts are computed by `dara.analysis.claims` from the tables above and below, with warm starts as "
            "the unit of replication (each run trains from one of a few independent warm-start policies, shared by "
            "the two arms of a claim; results without a `warm_start` column are one warm start). Crossing claims: a "
            "log-rank test stratified by warm start (never-crossing runs censored at their last step), its direction "
            "from the method's observed minus expected crossings; beside it the Kaplan-Meier medians and the "
            "difference of median crossing steps (ours minus the baseline; never-crossing runs at their last step + "
            "1) with a two-level bootstrap 95 % interval (warm starts, then seeds within them) and per warm start. "
            '"Not lower" claims: a non-inferiority test of the mean difference against a margin stated with its '
            "reason (`analysis/config.yaml` `non_inferiority`, below): paired by warm start (t with W - 1 degrees of "
            "freedom) when both arms share two or more warm starts, Welch's t over runs with one; the interval shown "
            "is the two-level bootstrap one, the bound the one-sided 97.5 % bound that decides (the p is doubled: "
            "each claim is a test at 5 % over its two directions, as the two-sided log-rank test is); arms, base and "
            "the floor/ceiling rule are read on the warm starts both arms share. Every tested claim "
            f'enters one family, Holm-corrected: "supported" when the adjusted p is below {significance} and the '
            f'estimate points the claim\'s way, "refuted" when it is below {significance} and points the other way '
            '(for "not lower": significantly worse than the margin), "not significant" otherwise; when both arms '
            'end more than the margin worse than the step-0 base only "worse than the margin" is tested, and the '
            'claim is "not informative" unless refuted. Not tested: "inconclusive" (neither arm crossed), "not '
            'informative" (both arms within the margin of the metric\'s floor or ceiling), "not testable" (runs '
            f"missing). Thresholds are fixed in the config before the runs: format {config['format_threshold']:g}, "
            f"stable length {config['stable_crossing']['claim_threshold']:g}. The paper's numbers come from the "
            "`analysis/reference/` rows named beside them.")


def _margins_table(config: dict) -> str:
    """The non-inferiority margins with their reasons, as the config states them."""
    rows = []
    for metric in config["non_inferiority"]:
        settings = non_inferiority(config, metric)
        low, high = settings["bounds"]
        rows.append({"metric": metric, "margin": settings["margin"], "bounds": f"{low:g} to {high:g}",
                     "reason": settings["reason"]})
    return pd.DataFrame(rows).to_markdown(index=False, floatfmt="g")


def _denser_regime(crossings: pd.DataFrame, metrics: pd.DataFrame | None, config: dict, tables: Path,
                   scale: str) -> list[str]:
    """REPORT.md's denser-regime section, also written to tables/denser_regime.{md,csv} (the snapshot's copy): always,
    "not testable" where the scale has no runs of the dense task."""
    settings = config.get("denser_regime")
    if settings is None:  # the workflow still expects the files: say why they are empty
        write_text_atomic(tables / "denser_regime.md", "No denser-regime contrast: analysis/config.yaml has no "
                                                       "denser_regime block.\n")
        write_csv_atomic(tables / "denser_regime.csv", pd.DataFrame(columns=["regime", "task", "contrast_verdict"]))
        return []
    tool, reward, threshold = config["tasks"]["tool"], config["format_reward"], config["format_threshold"]
    headline = crossings[crossings["task"] == tool]
    group_size = main_group_size(headline) if not headline.empty else 0
    runs = metrics if metrics is not None else pd.DataFrame(columns=["task", "method", "G", "seed", "step"])
    result = regime_contrast(crossings, runs, sparse_task=tool, dense_task=settings["task"], method=settings["method"],
                             baseline=settings["baseline"], reward=reward, threshold=threshold, group_size=group_size,
                             scale=scale)
    text = regime_markdown(result, method=settings["method"], baseline=settings["baseline"], reward=reward,
                           threshold=threshold)
    write_text_atomic(tables / "denser_regime.md", text + "\n")
    write_csv_atomic(tables / "denser_regime.csv", result.rows.assign(contrast=result.contrast, contrast_low=result.low,
                                                                      contrast_high=result.high,
                                                                      contrast_verdict=result.verdict))
    return ["## The denser regime (beyond the paper)", "",
            f"`{settings['task']}` is `{tool}` with the {reward} reward made denser at step 0 (calibrated on step-0 "
            "density alone: docs/tiny_scale.md, \"The denser regime\"), so DARA's weight on it starts lower; the table "
            "gives both regimes' step-0 density and weight. Same G, threshold, warm-start design and test as the "
            "headline.",
            "", text, ""]


def _revision() -> str:
    """The short revision of the code that wrote the report (`dara.provenance.git_revision`), "+edits" if dirty,
    "+edits?" where git could not say."""
    found = git_revision()
    return code_label(found["revision"], found["dirty"], width=12)


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    config, tables = inputs.config, inputs.tables
    reference = PaperReference(inputs.reference_dir)
    scale = inputs.scale
    crossings = pd.read_csv(tables / "first_crossing.csv")
    table1 = _read(tables / "table1.csv")
    table2 = _read(tables / "table2.csv")
    table4a = _read(tables / "table4a.csv")
    table1_runs, table4a_runs = _read(tables / "table1_runs.csv"), _read(tables / "table4a_runs.csv")
    survival = _read(tables / "survival.csv")
    stable = _read(inputs.figures / "fig5.csv")
    toy = _read(tables / "toy.csv")
    caveat = ("" if inputs.config["paper_setting"] else
              f"At {scale} scale our numbers come from the tiny CPU tasks and policies, not the paper's models and "
              "benchmarks: the `difference` column is a reading aid, not a replication test. ")

    lines = [f"# DARA reproduction report ({scale} scale)", "",
             f"Generated by `analysis/report_md.py` at code revision {_revision()}. {caveat}"
             "Paper values: `analysis/reference/` (sources there). Percentages unless stated.", ""]
    if inputs.metrics is not None:
        keys = ["task", "method", "G", "seed", *(["warm_start"] if "warm_start" in inputs.metrics.columns else [])]
        runs = inputs.metrics[keys].drop_duplicates()
        count = runs.groupby(["task", "G"]).agg(runs=("seed", "size"), **(
            {"warm_starts": ("warm_start", "nunique")} if "warm_start" in keys else {})).reset_index()
        lines += ["## Runs", "", count.to_markdown(index=False), ""]

    # The crossing-step comparison: the paper's per-seed steps (format_crossing_steps.csv) beside ours.
    tool, reward, threshold = config["tasks"]["tool"], config["format_reward"], config["format_threshold"]
    records = crossings[(crossings["task"] == tool) & (crossings["reward"] == reward)
                        & np.isclose(crossings["threshold"], threshold)]
    claims = headline_claims(crossings, table1_runs, stable, table4a_runs, config, reference)
    write_csv_atomic(tables / "claims.csv", claims_frame(claims))
    size = paper_model_size(inputs.primary_models.get(tool, ""))
    lines += [f"## Steps until the {reward} reward first reaches {threshold}", "",
              f"{reference.crossing_description(size)} Medians on both sides are the study's, median steps to cross "
              "(Kaplan-Meier): the first step by which half of the seeds crossed, a never-crossing seed censored at "
              "its run's last step (the paper's at its 100 steps). The paper's steps are verl's numbering (step k "
              "samples from the policy after k - 1 updates), ours the policy after k updates: the same policy is one "
              "step lower here (docs/verl.md, the step convention); the paper's numbers are shown as published.", ""]
    if not records.empty:
        group_size = main_group_size(records)
        comparison = crossing_comparison(records[records["G"] == group_size], reference.crossing_steps(), size)
        lines += [f"Ours: {tool}, G={group_size}, reward `{reward}` >= {threshold}, unsmoothed.", "",
                  _label_methods(comparison).to_markdown(index=False, floatfmt="g"), ""]
    else:
        lines += [f"No {tool} runs at this scale.", ""]

    lines += ["## Which claims our runs support", "", _verdict_rules(config), "", claims_markdown(claims), ""]
    verdicts = pd.Series([c.verdict for c in claims]).value_counts()
    lines += [f"In all: {', '.join(f'{n} {v}' for v, n in verdicts.items())} ({scale} scale).", "",
              "Non-inferiority margins (`analysis/config.yaml` `non_inferiority`, fixed before the runs):", "",
              _margins_table(config), ""]
    if inputs.metrics is not None:
        lines += ["Regime check (not a claim: the tasks were calibrated to start in this regime, so it cannot fail "
                  "in a meaningful way; outside the Holm family): " + regime_check(inputs.metrics, config,
                                                                                    reference).line(), ""]
    lines += _denser_regime(crossings, inputs.metrics, config, tables, scale)

    if table1 is not None:
        paper = reference.table("bfcl_v4_final.csv")
        for model, rows in table1.groupby("model", sort=True):
            size = paper_model_size(str(model))
            ours = rows[rows["cohort"] == "all runs"]
            base = rows[rows["cohort"].str.startswith("step 0")]
            measured = sorted(set(ours["metric"]))
            unmeasured = sorted(set(paper["metric"]) - set(measured))
            reference_rows = reference.final_scores(size, measured)
            merged, only_paper = _measured(table_comparison(pd.concat([base, ours]), reference_rows))
            steps = "/".join(str(s) for s in sorted(reference_rows["step"].unique()))
            lines += [f"## Table 1: held-out tool-calling accuracy and format, ours {model} vs paper BFCL-v4 {size}, "
                      f"step {steps}", "",
                      "Ours: every run at the final checkpoint (the retained-runs cohort is in `tables/table1.md`); "
                      "`base` = the step-0 policy. "
                      f"Not measured at this scale: {', '.join(unmeasured) or 'none'}. {only_paper}", "",
                      _label_methods(merged).to_markdown(index=False, floatfmt=".2f"), ""]
    if table2 is not None:
        paper = reference.three_rewards()
        setting = ", ".join(f"{size} step {step}" for size, step in
                            paper[["model_size", "step"]].drop_duplicates().itertuples(index=False))
        paper = paper.rename(columns={"value": "mean"}).assign(sd=np.nan)
        merged, only_paper = _measured(table_comparison(table2, paper, on=("method", "metric", "n_rewards")))
        lines += [f"## Table 2: two vs three rewards (paper: {setting})", "", only_paper, "",
                  _label_methods(merged).to_markdown(index=False, floatfmt=".2f"), ""]
    if table4a is not None:
        paper = reference.static_vs_dynamic()
        setting = "; ".join(f"{model}, {note}" for model, note in
                            paper[["model", "note"]].drop_duplicates().itertuples(index=False))
        paper = paper.melt(id_vars=["method"], value_vars=["accuracy", "exceed", "joint"], var_name="metric",
                           value_name="mean").replace({"metric": {"accuracy": "macro_pass1"}}).assign(sd=np.nan)
        merged, only_paper = _measured(table_comparison(table4a, paper))
        # ours at the checkpoint analysis/config.yaml fixes (static_vs_dynamic.checkpoint_fraction), named here
        steps = sorted(set(table4a_runs.loc[table4a_runs["method"] != "base", "step"].astype(int))) \
            if table4a_runs is not None and len(table4a_runs) else []
        where = (f"Ours at step {steps[0]}, the checkpoint nearest "
                 f"{config['static_vs_dynamic']['checkpoint_fraction']:g} of the run. " if len(steps) == 1 else "")
        lines += [f"## Table 4a: static vs dynamic weights (paper: {setting})", "",
                  f"{where}`base` = the step-0 policy, where evaluated. {only_paper}", "",
                  _label_methods(merged).to_markdown(index=False, floatfmt=".2f"), ""]
    lines += ["## Table 4b: instruct vs thinking", "", "Not reproduced at this scale; see `tables/table4b.md`.", ""]
    if stable is not None:
        paper = reference.stable_crossings()
        rule = reference.stable_crossing_rule()
        window, future = stable_window(stable, config)
        ours = crossing_summary(stable, by=("method", "threshold"))
        # how many seeds confirmed, beside the median: whether fig5 can separate methods at a threshold at all
        ours = ours.assign(confirmed=ours["n_crossed"].astype(int).astype(str) + "/" + ours["n_runs"].astype(str))[
            ["method", "threshold", "confirmed", "km_median"]].rename(columns={"km_median": "ours_km_median"})
        lines += ["## First stable crossing of the length reward (fig5)", "",
                  f"Ours: {config['tasks']['math']}, window {window}, confirmed over {future} steps (paper: "
                  f"{rule['window']} and {rule['future']}, `crossing_definitions.csv`); {MEDIAN_NAME}, an "
                  "unconfirmed seed censored at its last step; `confirmed`: seeds that confirmed it, of the "
                  "method's runs. Empty median = not confirmed by half the seeds.", "",
                  _label_methods(ours).to_markdown(index=False, floatfmt="g"), "",
                  "Paper:", "", paper[["model", "method", "threshold", "step", "note"]].to_markdown(index=False), ""]
    if survival is not None:
        lines += [f"## Beyond the paper: time to {reward} {threshold:g} as survival analysis", "",
                  "The study's median, `km_median` (Kaplan-Meier, never-crossing runs censored at their last step), "
                  "beside the paper's statistic, `median_of_crossed` (median over the seeds that crossed); against GDPO the median difference in steps with its "
                  "bootstrap 95 % interval (`ci_low`, `ci_high`; never-crossing seeds at last step + 1) and the "
                  "log-rank test. Figure: `figures/survival.png`.", "",
                  _label_methods(survival.drop(columns=["task"], errors="ignore")).to_markdown(index=False, floatfmt=".3g"), ""]
    if toy is not None:
        summary = crossing_summary(outcome_records(toy), by=("method", "G")).pivot(
            index="method", columns="G", values="km_median")
        summary.index = [palette.label(m) for m in summary.index]
        toy_defaults = ToyConfig(method="grpo", group_size=8, seed=0)
        sparse_start = toy_defaults.initial_success[toy_defaults.target_reward]
        lines += ["## Beyond the paper: mechanism toy", "",
                  f"Median steps (Kaplan-Meier; empty: fewer than half reached it) until a sparse reward starting at "
                  f"{sparse_start:.0%} reaches {toy_defaults.threshold:g} success, per group size "
                  f"(`dara.analysis.mechanism_toy`, {toy['seed'].nunique()} seeds; {int((~toy['reached']).sum())} runs censored). "
                  "Figure: `figures/toy.png`.", "", summary.to_markdown(floatfmt="g"), ""]
    lines += ["## Figures", "", "`figures/`: fig1b, fig2, fig3, fig4, fig5, fig6 (paper analogues), survival, toy, "
              "dynamics_<task> (every reward's mean and density per step), each as PNG and PDF.", ""]
    write_text_atomic(inputs.out_dir / "REPORT.md", "\n".join(lines))


if __name__ == "__main__":
    main()
