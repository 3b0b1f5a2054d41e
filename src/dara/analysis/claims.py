"""The paper's claims as statistical tests that can fail, checked against our runs by rule, not by hand.

Warm starts are the unit of replication: each run trains from one of a few independent warm-start policies
(``warm_start`` in the run tables; a table without the column is one warm start, and the claim says "1 warm
start"), and seed s of a method and of its baseline share theirs. Each test compares the arms within warm starts;
runs of a warm start only one arm has are left out of the test and of the difference, and the claim names it.

Verdicts, in the order they are decided:

- "not testable": the runs or evaluations a claim needs do not exist at this scale (or the arms share no warm
  start, or a non-inferiority claim has one shared warm start and a single run in an arm: no spread to bound);
- "inconclusive" (crossing claims): nothing to compare, since neither arm crossed the threshold, or no crossing
  happened while both arms were at risk within one warm start;
- "not informative" (non-inferiority claims, no test run): the metric cannot separate the arms, since both means
  sit within the margin of the metric's floor or of its ceiling (``bounds``);
- otherwise the claim is tested and gets one p-value and a direction (does the estimate point the claim's way?):
  "supported" when the Holm-adjusted p is below 0.05 and the estimate points the claim's way, "refuted" when it
  is below 0.05 and points the other way, "not significant" otherwise. One exception: when both arms of a
  non-inferiority claim end more than the margin worse than the step-0 base, training made both worse and "not
  lower than a worse arm" says nothing, but being worse than it beyond the margin still does; such a claim is
  tested for "worse than the margin" alone and is "refuted" when significant, "not informative" otherwise.

Crossing claims (:func:`faster_crossing`): a log-rank test stratified by warm start (statsmodels' ``survdiff``,
two-sided), never-crossing runs censored at their last step. The direction is the sign of the method's observed
minus expected crossings summed over warm starts (more crossings than expected: faster). The effect size is the
difference of median crossing steps (never-crossing runs at their last step + 1) with a two-level bootstrap 95 %
interval (:mod:`dara.analysis.effect_size`), and the same difference per warm start; the study's median stands in
the text (``crossing.median_crossing_step``: Kaplan-Meier, the one the headline and every table show). Nothing of the
effect size decides the verdict.

Non-inferiority claims (:func:`not_lower`, "not lower"/"not higher"), on per-run final scores with a margin per
metric (``non_inferiority`` in ``analysis/config.yaml``, each with its reason). With d = method minus baseline
(mirrored when lower is better): with two or more shared warm starts, each arm is averaged within each warm start
and d per warm start is bounded by a t interval with W - 1 degrees of freedom (paired by warm start); with one, by
Welch's t over runs. Both arms, the base and the floor/ceiling rule are read on the warm starts both arms share,
each warm start weighted alike (the population the test compares). Supported needs the lower bound of d above
-margin, refuted the upper bound below -margin, each bound one-sided at 97.5 % (the ends of the two-sided 95 %
interval). Every claim of the family is so a test at 5 % over its two directions, as the two-sided log-rank test of
a crossing claim is: the p that enters the family is twice the one-sided p against -margin of the direction the
estimate points ("d > -margin" when the mean difference is at or above -margin, "d < -margin" when below, or when
both arms end more than the margin below the base, where only that direction is informative), at most 1.

Holm (:func:`holm`): every claim with a p-value (crossing and non-inferiority claims, not the untested verdicts)
is one family; each claim carries its raw and its Holm-adjusted p (``statsmodels.stats.multitest.multipletests``),
and the verdict uses the adjusted one. A claim checked alone is a family of one (adjusted p = raw p).

The "format starts sparser and DARA up-weights it" check (:func:`sparse_upweighted`) is not a claim: the tasks
were calibrated to start in that regime, so it cannot fail in a meaningful way. REPORT.md shows it as a regime
check, outside the family.

Each claim carries the paper's side as a :class:`~dara.analysis.paper_reference.PaperStatement`: the text with
numbers computed from ``analysis/reference/*.csv`` and the rows it comes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import pandas as pd

from dara.analysis import palette
from dara.analysis.crossing import median_crossing_step, step_text, steps_never_after_last, survival_durations
from dara.analysis.effect_size import bootstrap_mean_difference, bootstrap_median_difference, per_warm_start_differences
from dara.analysis.kaplan_meier import stratified_logrank_test
from dara.analysis.paper_reference import PaperStatement
from dara.analysis.run_tables import RUN_KEYS
from dara.analysis.tables import final_checkpoint

Verdict = Literal["supported", "refuted", "not significant", "inconclusive", "not informative", "not testable"]
SIGNIFICANCE = 0.05  # Holm-adjusted p below which a tested claim is supported or refuted
CONFIDENCE = 0.95  # of the bootstrap intervals, and two-sided of the non-inferiority bounds (each end one-sided 97.5 %)


@dataclass(frozen=True)
class Claim:
    """One claim of the paper against our runs. ``paper``/``reference``: the paper's numbers and the reference rows
    they come from. Crossing claims fill ``median_difference`` (steps, ours minus the baseline), non-inferiority
    claims ``mean_difference`` (the metric's units) and ``bound`` (the one-sided 97.5 % bound that decides "supported":
    the lower bound of the difference when higher is better, the upper one when lower is better); ``ci_low``/
    ``ci_high``: the two-level bootstrap 95 % interval of that difference. ``p_raw``/``p_holm``: the claim's p-value
    and its Holm-adjusted value (NaN when no test decides the verdict); ``direction``: +1 when the estimate points
    the claim's way, -1 when it points the other way, 0 without a test; ``fallback``: the verdict of a tested claim
    whose adjusted p is not significant. ``per_warm_start``: the difference within each warm start both arms have;
    ``warm_starts``: how many warm starts the test compared; ``n_method``/``n_baseline``: the runs of each arm it
    compared (0 when untested); ``task``: the task whose runs the claim reads (empty where the caller names none),
    which the ledger of draws uses to tell a new draw of those runs from a re-reading of the same ones."""

    claim: str
    paper: str
    reference: str
    ours: str
    verdict: Verdict
    scale: str
    median_difference: float = np.nan
    mean_difference: float = np.nan
    ci_low: float = np.nan
    ci_high: float = np.nan
    bound: float = np.nan
    p_raw: float = np.nan
    p_holm: float = np.nan
    direction: int = 0
    fallback: Verdict = "not significant"
    per_warm_start: str = ""
    warm_starts: int = 0
    n_method: int = 0
    n_baseline: int = 0
    task: str = ""


def tested_verdict(p_value: float, direction: int, fallback: Verdict = "not significant") -> Verdict:
    """The verdict of a tested claim from its (adjusted) p-value and the direction its estimate points; ``fallback``
    when the p-value is not significant."""
    if not p_value < SIGNIFICANCE:  # NaN included: no evidence either way
        return fallback
    return "supported" if direction > 0 else "refuted"


def holm(claims: Sequence[Claim]) -> list[Claim]:
    """``claims`` with ``p_holm`` the Holm-adjusted p over every claim that has a p-value, and their verdicts
    decided again from it; claims without a p-value (not tested) are returned as they are."""
    tested = [index for index, claim in enumerate(claims) if np.isfinite(claim.p_raw)]
    found = list(claims)
    if not tested:
        return found
    from statsmodels.stats.multitest import multipletests  # imported here: statsmodels is slow to import

    adjusted = multipletests([claims[index].p_raw for index in tested], alpha=SIGNIFICANCE, method="holm")[1]
    for index, p_value in zip(tested, adjusted):
        claim = claims[index]
        found[index] = replace(claim, p_holm=float(p_value),
                               verdict=tested_verdict(float(p_value), claim.direction, claim.fallback))
    return found


def warm_starts(frame: pd.DataFrame) -> np.ndarray:
    """Each row's warm start: the ``warm_start`` column, or 0 for every row of a table without one (results from
    before runs carried it: one warm start). A missing value in the column raises."""
    if "warm_start" not in frame.columns:
        return np.zeros(len(frame), dtype=np.int64)
    if frame["warm_start"].isna().any():
        missing = frame.loc[frame["warm_start"].isna(), [c for c in RUN_KEYS if c in frame.columns]]
        raise ValueError(f"rows without a warm_start: {missing.to_dict('records')}")
    return frame["warm_start"].to_numpy().astype(np.int64)


def _warm_start_text(count: int) -> str:
    return f"{count} warm start{'' if count == 1 else 's'}"


def _per_warm_start_text(differences: dict, spec: str) -> str:
    return ", ".join(f"ws{label} {value:{spec}}" for label, value in differences.items())


def _left_out_text(only_one: Sequence, what: str) -> str:
    """A note naming the warm starts only one arm has (left out of the comparison)."""
    if not len(only_one):
        return ""
    return f"; {', '.join(f'ws{label}' for label in only_one)} with one arm only, left out of {what}"


def _p_text(value: float) -> str:
    return "n/a" if not np.isfinite(value) else f"{value:.3g}"


def shared_crossing_arms(records: pd.DataFrame, method: str, baseline: str) -> tuple | None:
    """The two arms of a crossing comparison on the warm starts both have, as the effect size takes them: each arm's
    crossing steps (never-crossing runs at last step + 1) and each step's warm start; None without a shared warm
    start."""
    records = records.assign(warm_start=warm_starts(records))
    ours, base = (records[records["method"] == m] for m in (method, baseline))
    shared = np.intersect1d(ours["warm_start"], base["warm_start"])
    if not len(shared):
        return None
    ours, base = (rows[rows["warm_start"].isin(shared)] for rows in (ours, base))
    return (steps_never_after_last(ours), steps_never_after_last(base), ours["warm_start"].to_numpy(),
            base["warm_start"].to_numpy())


def faster_crossing(records: pd.DataFrame, method: str, baseline: str, *, paper: PaperStatement, scale: str,
                    what: str) -> Claim:
    """``method`` reaches the threshold in fewer steps than ``baseline``: a log-rank test stratified by warm start
    (never-crossing runs censored at their last step), direction from the method's observed minus expected
    crossings. Kaplan-Meier medians (over all runs of each arm) and the effect size (median difference over the
    shared warm starts, two-level bootstrap interval, per warm start; never-crossing runs at last step + 1) stand
    beside the verdict and do not change it.

    ``records``: crossing records (``crossing.crossing_records``, or fig5's stable ones) already narrowed to one task,
    reward, threshold and group size, with a ``warm_start`` column or without (one warm start).
    """
    claim = f"{palette.label(method)} reaches {what} in fewer steps than {palette.label(baseline)}"
    durations = survival_durations(records).assign(warm_start=warm_starts(records))
    ours_rows, base_rows = (durations[durations["method"] == m] for m in (method, baseline))
    if ours_rows.empty or base_rows.empty:
        missing = [m for m, rows in ((method, ours_rows), (baseline, base_rows)) if rows.empty]
        return Claim(claim, paper.text, paper.reference, f"no runs of {', '.join(missing)}", "not testable", scale)
    ours_median, base_median = (median_crossing_step(rows["step"], rows["last_step"])
                                for rows in (ours_rows, base_rows))
    shared = np.intersect1d(ours_rows["warm_start"], base_rows["warm_start"])
    only_one = np.setxor1d(ours_rows["warm_start"], base_rows["warm_start"])
    text = (f"KM median step {step_text(ours_median)} vs {step_text(base_median)} "
            f"(n={len(ours_rows)} vs {len(base_rows)}; crossed {int(ours_rows['observed'].sum())}/{len(ours_rows)} "
            f"vs {int(base_rows['observed'].sum())}/{len(base_rows)}; {_warm_start_text(len(shared))} shared"
            f"{_left_out_text(only_one, 'the test and the difference')}")
    if not len(shared):
        return Claim(claim, paper.text, paper.reference, f"{text}): no warm start both arms trained from",
                     "not testable", scale)
    if not ours_rows["observed"].any() and not base_rows["observed"].any():
        return Claim(claim, paper.text, paper.reference, f"{text}): neither arm crossed", "inconclusive", scale,
                     warm_starts=len(shared))
    pair = pd.concat([ours_rows, base_rows])
    test = stratified_logrank_test(pair["duration"], pair["observed"], pair["method"] == method, pair["warm_start"])
    if not np.isfinite(test.p_value):
        return Claim(claim, paper.text, paper.reference,
                     f"{text}): no crossing while both arms were at risk within a warm start", "inconclusive", scale,
                     warm_starts=len(shared))
    arms = shared_crossing_arms(durations, method, baseline)
    effect = bootstrap_median_difference(*arms, confidence=CONFIDENCE)
    per_warm_start = _per_warm_start_text(per_warm_start_differences(*arms, statistic="median"), "+g")
    direction = 1 if test.observed_minus_expected > 0 else -1
    text += (f"; median difference {effect.text()}, two-level bootstrap; stratified log-rank O-E "
             f"{test.observed_minus_expected:+.2f}, p={_p_text(test.p_value)})")
    return Claim(claim, paper.text, paper.reference, text, tested_verdict(test.p_value, direction), scale,
                 median_difference=effect.difference, ci_low=effect.low, ci_high=effect.high, p_raw=test.p_value,
                 p_holm=test.p_value, direction=direction, per_warm_start=per_warm_start, warm_starts=len(shared),
                 n_method=len(arms[0]), n_baseline=len(arms[1]))


@dataclass(frozen=True)
class NonInferiorityTest:
    """A test of d = method - baseline (higher better) against -margin. ``lower``/``upper``: the one-sided 97.5 %
    bounds of d (the two-sided 95 % interval); ``p_within``/``p_beyond``: one-sided p of "d > -margin" and of
    "d < -margin"."""

    estimate: float
    lower: float
    upper: float
    p_within: float
    p_beyond: float
    how: str


def non_inferiority_test(a, b, warm_starts_a, warm_starts_b, margin: float) -> NonInferiorityTest:
    """The test behind :func:`not_lower`, on values where higher is better and both arms have the same warm starts.

    Two or more warm starts: each arm's mean per warm start, d per warm start (paired), a one-sample t bound with
    W - 1 degrees of freedom. One warm start: Welch's t over the runs (``CompareMeans``, unequal variances).
    """
    from statsmodels.stats.weightstats import CompareMeans, DescrStatsW  # statsmodels is slow to import

    a, b = pd.Series(np.asarray(a, float)), pd.Series(np.asarray(b, float))
    labels = np.unique(warm_starts_a)
    if not np.array_equal(labels, np.unique(warm_starts_b)):
        raise ValueError(f"both arms need the same warm starts, got {labels.tolist()} and "
                         f"{np.unique(warm_starts_b).tolist()}")
    # zero spread (every warm start's difference alike) makes t infinite or undefined: the bound is then the
    # estimate and the p 0, 1 or NaN ("not significant"), which is what such data can say
    with np.errstate(divide="ignore", invalid="ignore"):
        if len(labels) >= 2:
            per_warm_start = (a.groupby(np.asarray(warm_starts_a)).mean() - b.groupby(np.asarray(warm_starts_b)).mean())
            stats = DescrStatsW(per_warm_start.to_numpy())
            lower, upper = stats.tconfint_mean(alpha=1 - CONFIDENCE)  # a two-sided 95 % = two one-sided 97.5 %
            p_within = stats.ttest_mean(value=-margin, alternative="larger")[1]
            p_beyond = stats.ttest_mean(value=-margin, alternative="smaller")[1]
            return NonInferiorityTest(float(stats.mean), float(lower), float(upper), float(p_within), float(p_beyond),
                                      f"paired by warm start, t with {len(labels) - 1} df")
        compared = CompareMeans(DescrStatsW(a.to_numpy()), DescrStatsW(b.to_numpy()))
        alpha = (1 - CONFIDENCE) / 2  # each bound one-sided at 97.5 %
        lower = compared.tconfint_diff(alpha=alpha, alternative="larger", usevar="unequal")[0]
        upper = compared.tconfint_diff(alpha=alpha, alternative="smaller", usevar="unequal")[1]
        p_within = compared.ttest_ind(alternative="larger", usevar="unequal", value=-margin)[1]
        p_beyond = compared.ttest_ind(alternative="smaller", usevar="unequal", value=-margin)[1]
    return NonInferiorityTest(float(a.mean() - b.mean()), float(lower), float(upper), float(p_within),
                              float(p_beyond), "Welch t over runs")


def _value_text(value: float) -> str:
    return "n/a" if value is None or not np.isfinite(value) else f"{value:.2f}"


def _arm_values(runs: pd.DataFrame, method: str, metric: str) -> pd.DataFrame:
    """One arm's runs: value and warm start; a run without a value raises, naming it."""
    rows = runs[runs["method"] == method]
    if rows[metric].isna().any():
        missing = rows.loc[rows[metric].isna(), [c for c in RUN_KEYS if c in rows.columns]]
        raise ValueError(f"runs of {method} without {metric}: {missing.to_dict('records')}")
    return pd.DataFrame({"value": rows[metric].astype(float).to_numpy(), "warm_start": warm_starts(rows)})


def not_lower(runs: pd.DataFrame, metric: str, method: str, baseline: str, *, margin: float, paper: PaperStatement,
              scale: str, what: str, higher_is_better: bool = True, base_method: str = "base",
              bounds: tuple[float, float] = (0.0, 100.0)) -> Claim:
    """Non-inferiority of ``method`` to ``baseline`` on ``metric`` within ``margin`` (the metric's units, from
    ``analysis/config.yaml`` ``non_inferiority``), by the rule in the module docstring.

    ``runs``: one row per run (method, seed, warm_start when the runs have one, the metric's column), the final
    checkpoint's value; rows of method ``base_method`` (each run's step-0, untrained, evaluation) give the base, shown
    beside both arms ("base n/a" when absent). Higher is better unless ``higher_is_better`` is False (then every
    comparison is mirrored). ``bounds``: the metric's floor and ceiling.
    """
    direction_word = "not lower" if higher_is_better else "not higher"
    claim = f"{palette.label(method)}'s {what} is {direction_word} than {palette.label(baseline)}'s"
    missing = [m for m in (method, baseline)
               if metric not in runs.columns or runs.loc[runs["method"] == m, metric].isna().all()]
    if missing:
        return Claim(claim, paper.text, paper.reference, f"no {metric} for {', '.join(missing)}", "not testable", scale)
    a, b = _arm_values(runs, method, metric), _arm_values(runs, baseline, metric)
    sign = 1.0 if higher_is_better else -1.0
    shared = np.intersect1d(a["warm_start"], b["warm_start"])
    only_one = np.setxor1d(a["warm_start"], b["warm_start"])
    if not len(shared):
        return Claim(claim, paper.text, paper.reference, f"no warm start both {method} and {baseline} trained from",
                     "not testable", scale)
    # the arms, the base and the floor/ceiling rule on the warm starts the test compares, each weighted alike
    a, b = a[a["warm_start"].isin(shared)], b[b["warm_start"].isin(shared)]
    base_runs = runs[runs["method"] == base_method]
    base_values = pd.DataFrame({"value": base_runs[metric].astype(float).to_numpy(),
                                "warm_start": warm_starts(base_runs)}).dropna()
    base_values = base_values[base_values["warm_start"].isin(shared)]
    base = float(base_values.groupby("warm_start")["value"].mean().mean()) if len(base_values) else np.nan
    mean_a, mean_b = (float(arm.groupby("warm_start")["value"].mean().mean()) for arm in (a, b))
    text = (f"mean {mean_a:.2f} vs {mean_b:.2f} (base {_value_text(base)}; margin {margin:g}; n={len(a)} vs {len(b)}; "
            f"{_warm_start_text(len(shared))} shared")
    near = next((bound for bound in bounds if abs(mean_a - bound) <= margin and abs(mean_b - bound) <= margin), None)
    if near is not None:
        return Claim(claim, paper.text, paper.reference, f"{text}): both within the margin of the metric's bound "
                     f"{near:g}", "not informative", scale, warm_starts=len(shared))
    worse_only = np.isfinite(base) and all(sign * (base - mean) > margin for mean in (mean_a, mean_b))
    if len(shared) == 1 and min(len(a), len(b)) < 2:
        return Claim(claim, paper.text, paper.reference, f"{text}): one warm start and a single run of an arm: "
                     "no spread to bound the difference", "not testable", scale, warm_starts=1)
    test = non_inferiority_test(sign * a["value"], sign * b["value"], a["warm_start"], b["warm_start"], margin)
    effect = bootstrap_mean_difference(a["value"], b["value"], a["warm_start"], b["warm_start"], confidence=CONFIDENCE)
    per_warm_start = per_warm_start_differences(a["value"], b["value"], a["warm_start"], b["warm_start"],
                                                statistic="mean")
    # below the base only "worse than the margin" is informative (module docstring)
    direction = -1 if worse_only or test.estimate < -margin else 1
    p_raw = min(1.0, 2 * (test.p_within if direction > 0 else test.p_beyond))  # both directions at 5 % (docstring)
    fallback: Verdict = "not informative" if worse_only else "not significant"
    # the one-sided 97.5 % bounds of method - baseline in the metric's own direction: "supported" needs the first beyond
    # -margin (+margin when lower is better), "refuted" the second short of it
    bound, other_bound = sign * test.lower, sign * test.upper
    hypothesis = (f"{'>' if direction > 0 else '<'} -{margin:g}" if higher_is_better else
                  f"{'<' if direction > 0 else '>'} +{margin:g}")
    text += (f"{_left_out_text(only_one, 'the test and the difference')}): difference "
             f"{effect.text('points', '+.2f')}, two-level bootstrap; one-sided 97.5 % bounds {bound:+.2f} and "
             f"{other_bound:+.2f} against {-sign * margin:+g} ({test.how}); "
             f"p(difference {hypothesis}, doubled)={_p_text(p_raw)}")
    if worse_only:
        text += f"; both more than the margin {'below' if higher_is_better else 'above'} base: only worse is tested"
    return Claim(claim, paper.text, paper.reference, text, tested_verdict(p_raw, direction, fallback), scale,
                 mean_difference=effect.difference, ci_low=effect.low, ci_high=effect.high, bound=bound, p_raw=p_raw,
                 p_holm=p_raw, direction=direction, fallback=fallback,
                 per_warm_start=_per_warm_start_text(per_warm_start, "+.2f"), warm_starts=len(shared),
                 n_method=len(a), n_baseline=len(b))


def per_run_values(scores: pd.DataFrame, metrics: Sequence[str], step: int | None = None) -> pd.DataFrame:
    """The per-run table :func:`not_lower` tests: each run's checkpoint at ``step`` (its final one when None) under
    its method and each run's step-0 evaluation (method "base"), with its warm start where ``scores`` has one,
    metrics in percent. ``scores``: ``tables.paper_metrics`` of the evaluations; metrics it lacks are left out."""
    keys = [*RUN_KEYS, *(["warm_start"] if "warm_start" in scores.columns else []), "step"]
    present = [metric for metric in metrics if metric in scores.columns]
    base = scores[scores["step"] == 0].assign(method="base")
    table = pd.concat([base, final_checkpoint(scores, step)], ignore_index=True)[[*keys, *present]]
    return table.assign(**{metric: 100.0 * table[metric] for metric in present})


@dataclass(frozen=True)
class RegimeCheck:
    """Whether the runs start in the regime the method is about (not a claim: see the module docstring).
    ``holds``: None when the runs cannot show it."""

    statement: str
    paper: str
    reference: str
    observed: str
    holds: bool | None

    def line(self) -> str:
        outcome = {True: "holds", False: "does not hold", None: "not checkable"}[self.holds]
        return f"{self.statement}: **{outcome}**. {self.observed}. Paper: {self.paper} (`{self.reference}`)."


def sparse_upweighted(metrics: pd.DataFrame, sparse: str, dense: str, methods, *, paper: PaperStatement,
                      task: str) -> RegimeCheck:
    """In each run's first rollout batch, the sparse reward's density is below the dense one's and DARA's
    weight on it exceeds 1 (median over DARA runs). The first batch is the run's first logged row: step 0 in the
    CPU trainers' logs, step 1 in verl's (both the warm-start policy's rollouts, which the first update trains on)."""
    statement = f"on {task}, {sparse} starts sparser than {dense} and DARA up-weights it (w > 1)"
    needed = [f"density/{sparse}", f"density/{dense}", f"weight/{sparse}"]
    runs = metrics[metrics["method"].isin(methods)]
    if runs.empty or any(column not in runs.columns for column in needed):
        return RegimeCheck(statement, paper.text, paper.reference, "no DARA runs with density logs", None)
    first = runs.sort_values("step").groupby(list(RUN_KEYS)).head(1)
    density_sparse = float(first[needed[0]].median())
    density_dense = float(first[needed[1]].median())
    weight = float(first[needed[2]].median())
    observed = (f"First batch (step {int(first['step'].min())}): median density {sparse} {density_sparse:.2f} vs "
                f"{dense} {density_dense:.2f}; weight on {sparse} {weight:.2f} (n={len(first)} runs)")
    return RegimeCheck(statement, paper.text, paper.reference, observed,
                       density_sparse < density_dense and weight > 1)


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([c.__dict__ for c in claims], columns=list(Claim.__dataclass_fields__))


def claims_markdown(claims: list[Claim]) -> str:
    """The claims as REPORT.md shows them: the paper's numbers with their reference rows, ours, the difference per
    warm start, raw and Holm-adjusted p side by side, the verdict."""
    frame = claims_frame(claims)
    frame["paper"] = [f"{text} (`{reference}`)" for text, reference in zip(frame["paper"], frame["reference"])]
    frame["p (raw)"] = [_p_text(p) if np.isfinite(p) else "" for p in frame["p_raw"]]
    frame["p (Holm)"] = [_p_text(p) if np.isfinite(p) else "" for p in frame["p_holm"]]
    frame = frame.rename(columns={"per_warm_start": "per warm start"})
    columns = ["claim", "paper", "ours", "per warm start", "p (raw)", "p (Holm)", "verdict", "scale"]
    return frame[columns].to_markdown(index=False, disable_numparse=True)  # the p-values as written above
