"""The denser-regime contrast: does DARA's lead over GDPO shrink when the sparse reward is not sparse?

DARA's weight on a reward is ``sqrt(max_j pi_j / pi_k)``: large when the reward varies in few groups, near 1 when
it varies in many. So the mechanism makes a prediction that can fail: on the same task with the format reward
made denser at step 0 (``toolcall_dense``: density near 0.25 against toolcall's near 0.04 in the
calibration screens), DARA-Sym's lead over GDPO
in steps to format 0.8 is smaller than in the sparse regime. The prediction, its test and its threshold are fixed
here and in ``analysis/config.yaml`` (``denser_regime``) before the runs.

For each regime (the headline's task and its denser twin, same group size) this module reports the step-0 density
of the reward and DARA's weight on it (median over warm starts of the median over runs), the crossing comparison
of :func:`dara.analysis.claims.faster_crossing` (stratified log-rank, Kaplan-Meier medians, the median difference
with its two-level bootstrap interval), and the contrast of the two regimes: the dense regime's median difference
minus the sparse one's, with a two-level bootstrap interval that resamples each regime's warm starts on its own (the
regimes' warm starts are independent policies). "supported" when the interval lies above 0 (the lead shrinks),
"refuted" when it lies below 0 (it grows), "not significant" otherwise. It is a secondary analysis, outside the
Holm family of the paper's claims, and says so where it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dara.analysis import palette
from dara.analysis.claims import CONFIDENCE, Claim, faster_crossing, shared_crossing_arms, warm_starts
from dara.analysis.effect_size import BOOTSTRAP_SEED, resampled_differences
from dara.analysis.paper_reference import PaperStatement

NOT_IN_THE_PAPER = PaperStatement("not in the paper: the mechanism's prediction (docs/tiny_scale.md)", "")


@dataclass(frozen=True)
class RegimeContrast:
    """The two regimes' rows (``rows``: one per regime) and the contrast of their median differences."""

    rows: pd.DataFrame
    contrast: float
    low: float
    high: float
    verdict: str

    def line(self) -> str:
        if not np.isfinite(self.contrast):
            return f"Contrast: {self.verdict}."
        percent = f"{100 * CONFIDENCE:g} %"
        return (f"Contrast (dense minus sparse median difference): {self.contrast:+g} steps ({percent} two-level "
                f"bootstrap CI {self.low:+g} to {self.high:+g}, each regime's warm starts resampled on their own): "
                f"**{self.verdict}**.")


def _step0_median(metrics: pd.DataFrame, column: str) -> float:
    """Median over warm starts of the median over runs of ``column`` at step 0 (NaN without such rows)."""
    rows = metrics[metrics["step"] == 0]
    if rows.empty or column not in rows:
        return float("nan")
    by_start = rows.assign(warm_start=warm_starts(rows)).groupby("warm_start")[column].median()
    return float(by_start.median())


def regime_contrast(crossings: pd.DataFrame, metrics: pd.DataFrame, *, sparse_task: str, dense_task: str,
                    method: str, baseline: str, reward: str, threshold: float, group_size: int,
                    scale: str) -> RegimeContrast:
    """The denser-regime contrast (module docstring) from the crossing records (``first_crossing.csv``) and the runs'
    metrics."""
    rows, arms = [], []
    for regime, task in (("sparse", sparse_task), ("dense", dense_task)):
        records = crossings[(crossings["task"] == task) & (crossings["reward"] == reward)
                            & np.isclose(crossings["threshold"], threshold) & (crossings["G"] == group_size)]
        runs = metrics[(metrics["task"] == task) & (metrics["G"] == group_size)]
        claim: Claim = faster_crossing(records, method, baseline, paper=NOT_IN_THE_PAPER, scale=scale,
                                       what=f"{reward} {threshold:g}")
        rows.append({
            "regime": regime, "task": task, "G": group_size,
            f"{reward} density, step 0": _step0_median(runs[runs["method"] == baseline], f"density/{reward}"),
            f"{palette.label(method)} weight on {reward}, step 0": _step0_median(runs[runs["method"] == method],
                                                                                f"weight/{reward}"),
            "median difference (steps)": claim.median_difference, "ci_low": claim.ci_low, "ci_high": claim.ci_high,
            "log-rank p": claim.p_raw, "verdict (alone)": claim.verdict, "ours": claim.ours,
        })
        arms.append(shared_crossing_arms(records, method, baseline) if not records.empty else None)
    table = pd.DataFrame(rows)
    if any(arm is None for arm in arms):
        missing = [row["task"] for row, arm in zip(rows, arms) if arm is None]
        return RegimeContrast(table, float("nan"), float("nan"), float("nan"),
                              f"not testable (no runs of both arms on {', '.join(missing)})")
    # one bootstrap per regime, each with its own generator: the regimes share no warm start
    (sparse_point, sparse_draws), (dense_point, dense_draws) = (
        resampled_differences(*arm, statistic="median", seed=BOOTSTRAP_SEED + offset)
        for offset, arm in enumerate(arms))
    draws = dense_draws - sparse_draws
    tail = (1 - CONFIDENCE) / 2
    low, high = (float(v) for v in np.quantile(draws, [tail, 1 - tail]))
    verdict = "supported" if low > 0 else "refuted" if high < 0 else "not significant"
    return RegimeContrast(table, float(dense_point - sparse_point), low, high, verdict)


def regime_markdown(result: RegimeContrast, *, method: str, baseline: str, reward: str, threshold: float) -> str:
    """The section's table and its contrast line."""
    shown = result.rows.drop(columns=["ours", "ci_low", "ci_high"]).copy()
    shown["median difference (steps)"] = [
        f"{d:+g} ({lo:+g} to {hi:+g})" if np.isfinite(d) else "n/a"
        for d, lo, hi in result.rows[["median difference (steps)", "ci_low", "ci_high"]].itertuples(index=False)]
    lines = [shown.to_markdown(index=False, floatfmt=".3g"), "",
             *(f"- {row.regime}: {row.ours}" for row in result.rows.itertuples()), "", result.line(),
             "", f"Prediction (fixed before the runs): {palette.label(method)}'s lead over {palette.label(baseline)} "
             f"in steps to {reward} {threshold:g} is smaller in the dense regime (contrast > 0). A secondary analysis, "
             "outside the Holm family of the claims; each regime's log-rank p is unadjusted."]
    return "\n".join(lines)
