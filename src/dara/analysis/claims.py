"""The paper's claims, checked against our results by rule, not by hand.

Each check returns a :class:`Claim` with a verdict: "supported", "not supported", or "not testable"
(the runs or evaluations it needs do not exist at this scale), or "inconclusive" (a crossing claim
where neither method reached the threshold). A crossing claim whose medians point the paper's way but whose
log-rank test is not significant at 5 % is "same direction, not significant": with three seeds a one-step lead
is no evidence. A "not lower" claim (:func:`not_lower`, a non-inferiority check with a margin stated per metric
in ``analysis/config.yaml``) is "not informative" when the metric cannot tell the arms apart: both end more than
the margin worse than the untrained (step-0) policy, or both sit at the same end of the metric's range (0 vs 0,
100 vs 100). REPORT.md lists them as they come.

Each claim carries the paper's side as a :class:`~dara.analysis.paper_reference.PaperStatement`: the text with
numbers computed from ``analysis/reference/*.csv`` and the rows it comes from. A crossing claim also carries its
effect size: the difference of median crossing steps with a bootstrap 95 % interval over seeds
(:mod:`dara.analysis.effect_size`), beside the log-rank p-value that decides its verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd

from dara.analysis import palette
from dara.analysis.effect_size import bootstrap_median_difference, crossing_steps
from dara.analysis.kaplan_meier import kaplan_meier, logrank_test
from dara.analysis.paper_reference import PaperStatement
from dara.analysis.tables import survival_durations

Verdict = Literal["supported", "same direction, not significant", "not supported", "inconclusive", "not informative",
                  "not testable"]
SIGNIFICANCE = 0.05  # log-rank p below which a faster crossing counts as supported


@dataclass(frozen=True)
class Claim:
    """One claim of the paper against our runs. ``paper``/``reference``: the paper's numbers and the reference
    rows they come from. Crossing claims fill ``median_difference`` (steps, ours minus baseline), its 95 %
    interval ``ci_low``/``ci_high`` and ``logrank_p``; other claims leave them NaN."""

    claim: str
    paper: str
    reference: str
    ours: str
    verdict: Verdict
    scale: str
    median_difference: float = np.nan
    ci_low: float = np.nan
    ci_high: float = np.nan
    logrank_p: float = np.nan


def _km_median(durations: pd.DataFrame) -> float:
    """Kaplan-Meier median crossing step; +inf when the curve never falls to one half."""
    km = kaplan_meier(durations["duration"].to_numpy(float), durations["observed"].to_numpy(bool))
    return np.inf if km.median is None else km.median


def _step_text(value: float) -> str:
    return "never" if not np.isfinite(value) else f"{value:g}"


def faster_crossing(records: pd.DataFrame, method: str, baseline: str, *, paper: PaperStatement, scale: str,
                    what: str) -> Claim:
    """``method`` reaches the threshold in fewer steps than ``baseline``: Kaplan-Meier median crossing
    step strictly smaller (never-crossing runs censored, not dropped) and a log-rank p-value below 5 %.
    The effect size (median difference and its bootstrap interval, never-crossing seeds at last step + 1)
    is reported beside the verdict and does not change it.

    ``records``: crossing records (``tables.crossing_records``) already narrowed to one task, reward,
    threshold and group size.
    """
    claim = f"{palette.label(method)} reaches {what} in fewer steps than {palette.label(baseline)}"
    durations = survival_durations(records)
    ours_rows, base_rows = (durations[durations["method"] == m] for m in (method, baseline))
    if ours_rows.empty or base_rows.empty:
        missing = [m for m, rows in ((method, ours_rows), (baseline, base_rows)) if rows.empty]
        return Claim(claim, paper.text, paper.reference, f"no runs of {', '.join(missing)}", "not testable", scale)
    effect = bootstrap_median_difference(crossing_steps(ours_rows), crossing_steps(base_rows))
    ours_median, base_median = _km_median(ours_rows), _km_median(base_rows)
    test = logrank_test(ours_rows["duration"], ours_rows["observed"], base_rows["duration"], base_rows["observed"])
    p_text = "n/a" if np.isnan(test.p_value) else f"{test.p_value:.3g}"
    ours = (f"median step {_step_text(ours_median)} vs {_step_text(base_median)} "
            f"(n={len(ours_rows)} vs {len(base_rows)}; crossed {int(ours_rows['observed'].sum())}/"
            f"{len(ours_rows)} vs {int(base_rows['observed'].sum())}/{len(base_rows)}; "
            f"median difference {effect.text()}; log-rank p={p_text})")
    if not np.isfinite(ours_median) and not np.isfinite(base_median):
        verdict: Verdict = "inconclusive"
    elif (ours_median if np.isfinite(ours_median) else np.inf) >= (base_median if np.isfinite(base_median) else np.inf):
        verdict = "not supported"
    elif test.p_value < SIGNIFICANCE:
        verdict = "supported"
    else:
        verdict = "same direction, not significant"
    return Claim(claim, paper.text, paper.reference, ours, verdict, scale, effect.difference, effect.low, effect.high,
                 test.p_value)


def _value_text(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.2f}"


def not_lower(summary: pd.DataFrame, metric: str, method: str, baseline: str, *, margin: float,
              paper: PaperStatement, scale: str, what: str, higher_is_better: bool = True, base_method: str = "base",
              bounds: tuple[float, float] = (0.0, 100.0)) -> Claim:
    """Non-inferiority of ``method`` to ``baseline`` on ``metric`` within ``margin`` (the metric's own units,
    from ``analysis/config.yaml`` ``non_inferiority_margins``).

    ``summary``: rows with method, metric, mean, sd, n; a row of method ``base_method`` (the step-0, untrained
    policy) is the base, shown beside both arms ("base n/a" when absent). With higher better (mirrored when
    lower is better), in this order:

    - "not supported" when mean(method) < mean(baseline) - margin (worse than the baseline beyond the margin is
      informative whatever the base);
    - "not informative" when both arms end below the base by more than the margin (training made both worse,
      so "not lower than a worse arm" says nothing), or when both means sit at the same end of ``bounds`` (the
      metric's range, percent by default: 0 vs 0 or 100 vs 100), where the metric cannot separate them;
    - "supported" otherwise.

    The pooled SD of the two arms is reported beside the verdict and does not change it.
    """
    direction = "not lower" if higher_is_better else "not higher"
    claim = f"{palette.label(method)}'s {what} is {direction} than {palette.label(baseline)}'s"
    rows = summary[summary["metric"] == metric].set_index("method")
    if method not in rows.index or baseline not in rows.index:
        return Claim(claim, paper.text, paper.reference, f"no {metric} for {method} or {baseline}", "not testable",
                     scale)
    a, b = rows.loc[method], rows.loc[baseline]
    if not (np.isfinite(a["mean"]) and np.isfinite(b["mean"])):
        return Claim(claim, paper.text, paper.reference, f"no {metric} mean for {method} or {baseline}",
                     "not testable", scale)
    base = float(rows.loc[base_method, "mean"]) if base_method in rows.index else np.nan
    pooled = float(np.sqrt(np.nansum([a["sd"] ** 2, b["sd"] ** 2]) / 2))
    sign = 1.0 if higher_is_better else -1.0
    gap = sign * (a["mean"] - b["mean"])
    below_base = np.isfinite(base) and all(sign * (base - arm["mean"]) > margin for arm in (a, b))
    at_bound = next((bound for bound in bounds if np.isclose(a["mean"], bound, rtol=0, atol=1e-9)
                     and np.isclose(b["mean"], bound, rtol=0, atol=1e-9)), None)
    ours = (f"{a['mean']:.2f} vs {b['mean']:.2f} (base {_value_text(base)}; margin {margin:g}; pooled SD {pooled:.2f}; "
            f"n={int(a['n'])} vs {int(b['n'])})")
    if gap < -margin - 1e-9:  # 1e-9: float noise of the means
        verdict: Verdict = "not supported"
    elif below_base:
        verdict = "not informative"
        ours += f"; both more than the margin {'below' if higher_is_better else 'above'} base"
    elif at_bound is not None:
        verdict = "not informative"
        ours += f"; both at the metric's bound {at_bound:g}"
    else:
        verdict = "supported"
    return Claim(claim, paper.text, paper.reference, ours, verdict, scale)


def sparse_upweighted(metrics: pd.DataFrame, sparse: str, dense: str, methods, *, paper: PaperStatement, scale: str,
                      task: str) -> Claim:
    """In each run's first rollout batch, the sparse reward's density is below the dense one's and DARA's
    weight on it exceeds 1 (median over DARA runs). The first batch is the run's first logged row: step 0 in the
    CPU trainers' logs, step 1 in verl's (both the warm-start policy's rollouts, which the first update trains on)."""
    claim = f"on {task}, {sparse} starts sparser than {dense} and DARA up-weights it (w > 1)"
    needed = [f"density/{sparse}", f"density/{dense}", f"weight/{sparse}"]
    runs = metrics[metrics["method"].isin(methods)]
    if runs.empty or any(column not in runs.columns for column in needed):
        return Claim(claim, paper.text, paper.reference, "no DARA runs with density logs", "not testable", scale)
    first = runs.sort_values("step").groupby(["method", "G", "seed"]).head(1)
    density_sparse = float(first[needed[0]].median())
    density_dense = float(first[needed[1]].median())
    weight = float(first[needed[2]].median())
    ours = (f"first batch (step {int(first['step'].min())}) median density {sparse} {density_sparse:.2f} vs {dense} "
            f"{density_dense:.2f}; weight on {sparse} {weight:.2f} (n={len(first)} runs)")
    verdict: Verdict = "supported" if density_sparse < density_dense and weight > 1 else "not supported"
    return Claim(claim, paper.text, paper.reference, ours, verdict, scale)


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([c.__dict__ for c in claims], columns=list(Claim.__dataclass_fields__))


def claims_markdown(claims: list[Claim]) -> str:
    """The claims as REPORT.md shows them: the paper's numbers with their reference rows, ours, the verdict."""
    frame = claims_frame(claims)
    frame["paper"] = [f"{text} (`{reference}`)" for text, reference in zip(frame["paper"], frame["reference"])]
    return frame[["claim", "paper", "ours", "verdict", "scale"]].to_markdown(index=False)
