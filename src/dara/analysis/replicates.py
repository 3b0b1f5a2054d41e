"""Each claim's verdict in two independent replicates of a study, side by side, and what one that differs needs.

A replicate draws every run and every warm start again (``experiments/tiny_replicate.yaml``,
``dara.experiments.replicate_experiment``). A claim whose verdict is the same in both is reported with it; one whose
verdict differs is "undecided at this power", with the seeds per arm a power calculation from the pooled effect says
it needs.

The power calculation is the normal approximation every test here shares: at a fixed effect a test's z statistic
grows with the square root of the runs, so the signed z of the two replicates (from each claim's raw p-value and
direction: two-sided for crossing claims, one-sided for non-inferiority claims, whose p is one-sided) pool as
``(z_1 + z_2) / sqrt(2)`` over twice the seeds, and reaching ``z_{1-alpha} + z_{power}`` needs
``seeds x 2 x ((z_{1-alpha} + z_{power}) / z_pooled)^2`` seeds per arm. alpha is the family's 0.05 divided by its
size (Holm's first, strictest step, so the count is enough whatever the other claims do) and power 0.8. Seeds are
spread over warm starts as in the study. A pooled z at or against the claim's side needs more than any count: "no
pooled effect". Hand-written because it is three lines of arithmetic over the claims table: statsmodels' power
classes want an effect size in units the claims do not share (steps, hazard ratios, percentage points).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import norm

ALPHA = 0.05
POWER = 0.8
UNDECIDED = "undecided at this power"
NON_INFERIORITY = ("not lower", "not higher")
COLUMNS = ["claim", "verdict_study", "verdict_replicate", "p_holm_study", "p_holm_replicate", "effect_study",
           "effect_replicate", "agreement", "seeds_per_arm", "seeds_needed_per_arm"]


def signed_z(p_raw: float, direction: int, one_sided: bool) -> float:
    """The z statistic of a claim's test, positive when its estimate points the claim's way."""
    if not np.isfinite(p_raw) or direction == 0:
        return np.nan
    z = norm.isf(p_raw) if one_sided else norm.isf(p_raw / 2)
    return float(np.sign(direction) * z)


def seeds_needed(z_study: float, z_replicate: float, seeds: int, one_sided: bool, family: int) -> float:
    """Seeds per arm for 80 % power at the family's strictest Holm level, from the pooled z of two replicates of
    ``seeds`` seeds per arm each; inf when the pooled z does not point the claim's way."""
    if family < 1 or seeds < 1:
        raise ValueError(f"family size and seeds must be >= 1, got {family} and {seeds}")
    pooled = (z_study + z_replicate) / np.sqrt(2)
    if not np.isfinite(pooled) or pooled <= 0:
        return np.inf
    alpha = ALPHA / family
    needed = (norm.isf(alpha if one_sided else alpha / 2) + norm.isf(1 - POWER)) / pooled
    return float(np.ceil(2 * seeds * needed ** 2))


def _effect(row: pd.Series) -> float:
    return row["median_difference"] if np.isfinite(row["median_difference"]) else row["mean_difference"]


def compare(study: pd.DataFrame, replicate: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of the study (claims.csv of each replicate, `dara.analysis.claims.claims_frame`): both
    verdicts and Holm-adjusted p, both effects (median difference of crossing steps, or mean difference of a
    non-inferiority metric), whether they agree, and where not the seeds per arm needed. A claim one replicate lacks
    raises: the two must be the same study."""
    missing = sorted(set(study["claim"]) ^ set(replicate["claim"]))
    if missing:
        raise ValueError(f"the replicates do not check the same claims; only in one of them: {missing}")
    family = int(study["p_raw"].notna().sum())
    by_claim = replicate.set_index("claim")
    rows = []
    for _, ours in study.iterrows():
        theirs = by_claim.loc[ours["claim"]]
        one_sided = any(words in ours["claim"] for words in NON_INFERIORITY)
        agree = ours["verdict"] == theirs["verdict"]
        seeds = int(min(ours["n_method"], ours["n_baseline"])) if np.isfinite(ours["n_method"]) else 0
        needed = np.nan
        if not agree and seeds and family:
            needed = seeds_needed(signed_z(ours["p_raw"], ours["direction"], one_sided),
                                  signed_z(theirs["p_raw"], theirs["direction"], one_sided), seeds, one_sided, family)
        rows.append({"claim": ours["claim"], "verdict_study": ours["verdict"], "verdict_replicate": theirs["verdict"],
                     "p_holm_study": ours["p_holm"], "p_holm_replicate": theirs["p_holm"],
                     "effect_study": _effect(ours), "effect_replicate": _effect(theirs),
                     "agreement": ours["verdict"] if agree else UNDECIDED, "seeds_per_arm": seeds or np.nan,
                     "seeds_needed_per_arm": needed})
    return pd.DataFrame(rows, columns=COLUMNS)


def markdown(comparison: pd.DataFrame) -> str:
    """The comparison as REPORT.md and the snapshot show it."""
    shown = comparison.copy()
    shown["seeds_needed_per_arm"] = [
        "" if not np.isfinite(n) and agreement != UNDECIDED else ("no pooled effect" if not np.isfinite(n) else f"{n:.0f}")
        for n, agreement in zip(shown["seeds_needed_per_arm"], shown["agreement"])]
    for column in ("p_holm_study", "p_holm_replicate"):
        shown[column] = [f"{p:.3g}" if np.isfinite(p) else "" for p in shown[column]]
    for column in ("effect_study", "effect_replicate"):
        shown[column] = [f"{e:+.3g}" if np.isfinite(e) else "" for e in shown[column]]
    shown["seeds_per_arm"] = [f"{n:.0f}" if np.isfinite(n) else "" for n in shown["seeds_per_arm"]]
    return shown.to_markdown(index=False)
