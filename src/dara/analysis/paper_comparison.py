"""Side by side with the paper: comparison tables and the claims list behind ``results/<scale>/REPORT.md``.

Every number on our side comes from a table the analysis scripts wrote; every number on the paper's side
from ``analysis/reference/*.csv``. At tiny scale the tasks and models differ from the paper's, so the
difference column is a reading aid, not a replication test; the claims list says what holds at which scale.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from dara.analysis import claims as claim_checks
from dara.analysis import palette
from dara.analysis.crossing import median_crossing_step, step_text
from dara.analysis.paper_reference import PaperReference, PaperStatement
from dara.analysis.tables import main_group_size

def paper_model_size(model: str) -> str:
    """The paper's Table 1 model size our model is compared with: Qwen2.5-1.5B/3B by name; a tiny or
    smoke policy is set beside the paper's smaller model (1.5B), its main reference."""
    name = model.lower()
    if "3b" in name and "1.5b" not in name:
        return "3B"
    return "1.5B"


def crossing_comparison(records: pd.DataFrame, paper_steps: pd.DataFrame, model_size: str = "1.5B") -> pd.DataFrame:
    """The study's median first step the format reward reaches the threshold, ours vs the paper's, per method.

    ``records``: our crossing records narrowed to one task, reward, threshold and G. ``paper_steps``: the paper's
    per-seed steps with the runs' ``last_step`` (``PaperReference.crossing_steps``). Both sides' medians are the
    study's (``crossing.median_crossing_step``: Kaplan-Meier, never-crossing seeds censored at their run's last
    step; the paper's DVAO/GD²PO rows have such seeds), NaN ("never") when fewer than half crossed.
    """
    paper = paper_steps[paper_steps["model_size"] == model_size]
    rows = []
    for method in palette.ordered(set(records["method"]) | set(paper["method"])):
        ours = records[records["method"] == method]
        theirs = paper[paper["method"] == method]
        row = {"method": method}
        for side, runs in (("ours", ours), ("paper", theirs)):
            if len(runs):
                median = median_crossing_step(runs["step"], runs["last_step"])
                row[f"{side}_km_median"] = median if np.isfinite(median) else np.nan
                row[f"{side}_steps"] = " ".join(step_text(step) for step in runs["step"].astype(float))
            else:
                row[f"{side}_km_median"], row[f"{side}_steps"] = np.nan, "no runs"
        row["difference"] = row["ours_km_median"] - row["paper_km_median"]
        rows.append(row)
    return pd.DataFrame(rows, columns=["method", "paper_km_median", "ours_km_median", "difference", "paper_steps",
                                       "ours_steps"])


def table_comparison(ours: pd.DataFrame, paper: pd.DataFrame, on=("method", "metric")) -> pd.DataFrame:
    """Outer join of our summary (mean, sd, n) and the paper's (mean, sd) with ``difference`` = ours - paper.
    Rows only one side has are kept (empty on the other side)."""
    on = list(on)
    left = ours[[*on, "mean", "sd", "n"]].rename(columns={"mean": "ours", "sd": "ours_sd", "n": "ours_n"})
    right = paper[[*on, "mean", "sd"]].rename(columns={"mean": "paper", "sd": "paper_sd"})
    merged = left.merge(right, on=on, how="outer")
    merged["difference"] = merged["ours"] - merged["paper"]
    merged["ours_n"] = merged["ours_n"].astype("Int64")
    order = {method: position for position, method in enumerate(palette.METHOD_ORDER)}
    merged["_order"] = merged["method"].map(order)
    return merged.sort_values(["_order", *on[1:]]).drop(columns="_order").reset_index(drop=True)


def non_inferiority(config: dict, metric: str) -> dict:
    """The margin (the metric's units), its reason and the metric's bounds of a "not lower" claim on ``metric``
    (``non_inferiority`` in ``analysis/config.yaml``; bounds default to [0, 100], percent)."""
    settings = config.get("non_inferiority", {})
    if metric not in settings:
        raise KeyError(f"analysis config: non_inferiority has no margin for {metric!r}; it has {sorted(settings)}")
    entry = settings[metric]
    return {"margin": float(entry["margin"]), "reason": entry["reason"],
            "bounds": tuple(float(bound) for bound in entry.get("bounds", (0.0, 100.0)))}


def _final_score_statement(reference: PaperReference, metric: str, methods: list[str]) -> PaperStatement:
    """The paper's BFCL-v4 final scores of ``methods`` on ``metric``, or, for a metric its table does not report
    (irrelevance accuracy: its categories leave irrelevance out), a statement that it does not."""
    if metric in set(reference.table("bfcl_v4_final.csv")["metric"]):
        return reference.final_score_statement(metric, methods)
    return PaperStatement(f"not reported: the paper's BFCL-v4 table has no {metric} (a cost it does not measure)",
                          "bfcl_v4_final.csv")


def _not_lower(runs: pd.DataFrame, metric: str, method: str, baseline: str, config: dict, **options):
    settings = non_inferiority(config, metric)
    return claim_checks.not_lower(runs, metric, method, baseline, margin=settings["margin"], bounds=settings["bounds"],
                                  scale=config["scale"], **options)


def headline_claims(crossings: pd.DataFrame, table1_runs: pd.DataFrame | None, stable: pd.DataFrame | None,
                    table4a_runs: pd.DataFrame | None, config: dict, reference: PaperReference) -> list:
    """The paper's main claims checked on our results (see :mod:`dara.analysis.claims`), Holm-corrected as one
    family; the paper's side of each comes from ``reference`` (``analysis/reference/*.csv``).

    ``crossings``: first_crossing.csv; ``table1_runs``/``table4a_runs``: the per-run final scores (and step-0 base
    rows) of table1_runs.csv and table4a_runs.csv; ``stable``: fig5.csv's stable-crossing records. Thresholds come
    from the config, fixed before the runs: ``format_threshold`` and ``stable_crossing.claim_threshold``.
    """
    scale = config["scale"]
    tool, math = config["tasks"]["tool"], config["tasks"]["math"]
    reward, threshold = config["format_reward"], config["format_threshold"]
    found = []
    tool_records = crossings[(crossings["task"] == tool) & (crossings["reward"] == reward)
                             & np.isclose(crossings["threshold"], threshold)]
    if not tool_records.empty:
        group_size = main_group_size(tool_records)
        main = tool_records[tool_records["G"] == group_size]
        what = f"{reward} {threshold} on {tool} (G={group_size})"
        for method, baseline in (("dara_asym", "gdpo"), ("dara_sym", "gdpo"), ("dara_asym", "grpo"),
                                 ("dara_sym", "grpo")):
            found.append(claim_checks.faster_crossing(main, method, baseline, scale=scale, what=what,
                                                      paper=reference.crossing_statement([method, baseline])))
        for group_size_other, records in tool_records.groupby("G"):
            if group_size_other == group_size:
                continue
            found.append(claim_checks.faster_crossing(
                records, "dara_sym", "gdpo", paper=reference.figure_statement("group_size"),
                scale=scale, what=f"{reward} {threshold} on {tool} (G={group_size_other})"))
    else:
        statement = reference.crossing_statement(["dara_sym", "gdpo"])
        found.append(claim_checks.Claim(f"DARA reaches {reward} {threshold} in fewer steps than GDPO", statement.text,
                                        statement.reference, f"no {tool} runs", "not testable", scale))
    if table1_runs is not None and not table1_runs.empty:
        primary = table1_runs
        if "model" in table1_runs.columns:  # paper scale: one block per model; the claims read the primary (first)
            primary = table1_runs[table1_runs["model"] == sorted(table1_runs["model"].unique())[0]]
        for metric, what, baseline in (("average_accuracy", "final held-out accuracy", "gdpo"),
                                       ("average_format", "final held-out format", "gdpo"),
                                       ("average_format", "final held-out format", "grpo"),
                                       ("irrelevance_accuracy", "final held-out irrelevance accuracy", "gdpo")):
            found.append(_not_lower(primary, metric, "dara_sym", baseline, config, what=what,
                                    paper=_final_score_statement(reference, metric, ["dara_sym", baseline])))
    tool_claims = len(found)  # the ones above read the tool task's runs, the ones below the math task's
    if stable is not None and not stable.empty:
        strict = float(config["stable_crossing"]["claim_threshold"])
        records = stable[np.isclose(stable["threshold"], strict)]
        window, future = stable_window(stable, config)
        what = f"a stable {strict:g} length reward on {math} (window {window}, confirmed over {future} steps)"
        for method in ("dara_asym", "dara_sym"):
            paper = reference.stable_crossing_statement([method, "gdpo"])
            if records.empty:
                found.append(claim_checks.Claim(
                    f"{palette.label(method)} reaches {what} in fewer steps than GDPO", paper.text, paper.reference,
                    f"no stable-crossing records at the claim's threshold {strict:g}", "not testable", scale))
            else:
                found.append(claim_checks.faster_crossing(records, method, "gdpo", scale=scale, what=what, paper=paper))
    if table4a_runs is not None and not table4a_runs.empty:
        found.append(_not_lower(table4a_runs, "exceed", "dara_asym", "static_asym", config,
                                what="share of responses over budget", higher_is_better=False,
                                paper=reference.static_vs_dynamic_statement("exceed", ["dara_asym", "static_asym"])))
        found.append(_not_lower(table4a_runs, "macro_pass1", "dara_asym", "static_asym", config,
                                what="held-out accuracy",
                                paper=reference.static_vs_dynamic_statement("accuracy", ["dara_asym", "static_asym"])))
    tasks = [tool] * tool_claims + [math] * (len(found) - tool_claims)
    return claim_checks.holm([replace(claim, task=task) for claim, task in zip(found, tasks)])


def regime_check(metrics: pd.DataFrame, config: dict, reference: PaperReference) -> claim_checks.RegimeCheck:
    """The tool task's starting regime (its format reward sparse, DARA's weight on it above 1): a check of the
    calibration REPORT.md states beside the claims, not one of them (:func:`dara.analysis.claims.sparse_upweighted`)."""
    tool = config["tasks"]["tool"]
    return claim_checks.sparse_upweighted(metrics[metrics["task"] == tool], config["format_reward"], "correctness",
                                          ("dara_sym", "dara_asym"), paper=reference.figure_statement("fig1b"),
                                          task=tool)


def stable_window(stable: pd.DataFrame, config: dict) -> tuple[int, int]:
    """The window and confirmation span fig5 used: from its records (fig5.csv has them since the span scales
    with the run length), else from the configuration."""
    if {"window", "future"} <= set(stable.columns):
        return int(stable["window"].iloc[0]), int(stable["future"].iloc[0])
    return int(config["stable_crossing"]["window"]), int(config["stable_crossing"]["future"])
