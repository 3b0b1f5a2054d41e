"""Each claim's verdict in two independent replicates of a study, side by side, and what one that differs needs.

A replicate draws every run and every warm start again (``experiments/tiny_replicate.yaml``,
``dara.experiments.replicate_experiment``). A claim whose verdict is the same in both is reported with it; one whose
verdict differs is "undecided at this power", with the warm starts (and seeds per arm) a power calculation from the
pooled effect says it needs.

The power calculation is the normal approximation every test here shares: at a fixed effect a test's z statistic
grows with the square root of its units, so the signed z of the two replicates (from each claim's raw p-value and
direction; every claim's p is two-sided or its equivalent, `dara.analysis.claims`) pool as ``(z_1 + z_2) / sqrt(2)``
over twice the units, and reaching ``z_{1-alpha/2} + z_{power}`` needs ``2 x ((z_{1-alpha/2} + z_{power}) /
z_pooled)^2`` times the units of one replicate. alpha is the family's 0.05 divided by its size (Holm's first,
strictest step, so the count is enough whatever the other claims do) and power 0.8. The unit a test replicates is
the warm start (its paired comparison and its interval resample warm starts), so the need is given as warm starts
per claim with the seeds per arm beside it at the study's seeds per warm start; adding seeds on the same warm starts
does not buy it. A pooled z at or against the claim's side: "no pooled effect"; a claim one replicate could not test:
"not tested in one replicate". Hand-written because it is three lines of arithmetic over the claims table:
statsmodels' power classes want an effect size in units the claims do not share (steps, hazard ratios, points).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.stats import norm

ALPHA = 0.05
POWER = 0.8
UNDECIDED = "undecided at this power"
SMALLEST_P = 1e-300  # a p of 0 (no spread at all) would make z infinite: the pooled effect is then merely very large
COLUMNS = ["claim", "verdict_study", "verdict_replicate", "p_holm_study", "p_holm_replicate", "effect_study",
           "effect_replicate", "agreement", "warm_starts", "seeds_per_arm", "warm_starts_needed",
           "seeds_needed_per_arm"]


def signed_z(p_raw: float, direction: int) -> float:
    """The z statistic of a claim's two-sided test, positive when its estimate points the claim's way (NaN when
    untested)."""
    if not np.isfinite(p_raw) or direction == 0:
        return np.nan
    return float(np.sign(direction) * norm.isf(max(p_raw, SMALLEST_P) / 2))


def scale_needed(z_study: float, z_replicate: float, family: int) -> float:
    """How many times one replicate's units (warm starts) 80 % power at the family's strictest Holm level needs,
    from the pooled z of two replicates; inf when the pooled z does not point the claim's way."""
    if family < 1:
        raise ValueError(f"the family of tested claims must hold at least one, got {family}")
    pooled = (z_study + z_replicate) / np.sqrt(2)
    if not np.isfinite(pooled) or pooled <= 0:
        return np.inf
    return float(2 * ((norm.isf(ALPHA / family / 2) + norm.isf(1 - POWER)) / pooled) ** 2)


def _effect(row: pd.Series) -> float:
    return row["median_difference"] if np.isfinite(row["median_difference"]) else row["mean_difference"]


def compare(study: pd.DataFrame, replicate: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of the study (claims.csv of each replicate, `dara.analysis.claims.claims_frame`): both
    verdicts and Holm-adjusted p, both effects (median difference of crossing steps, or mean difference of a
    non-inferiority metric), whether they agree, and where not the warm starts (and seeds per arm) needed. A claim
    one replicate lacks raises: the two must be the same study."""
    missing = sorted(set(study["claim"]) ^ set(replicate["claim"]))
    if missing:
        raise ValueError(f"the replicates do not check the same claims; only in one of them: {missing}")
    family = int(study["p_raw"].notna().sum())
    by_claim = replicate.set_index("claim")
    rows = []
    for _, ours in study.iterrows():
        theirs = by_claim.loc[ours["claim"]]
        agree = ours["verdict"] == theirs["verdict"]
        warm_starts = int(ours["warm_starts"]) if ours["warm_starts"] > 0 else 0
        seeds = int(min(ours["n_method"], ours["n_baseline"]))
        tested = all(claim["n_method"] > 0 and np.isfinite(claim["p_raw"]) for claim in (ours, theirs))
        scale = np.nan
        if not agree and tested:
            scale = scale_needed(signed_z(ours["p_raw"], ours["direction"]),
                                 signed_z(theirs["p_raw"], theirs["direction"]), family)
        rows.append({"claim": ours["claim"], "verdict_study": ours["verdict"], "verdict_replicate": theirs["verdict"],
                     "p_holm_study": ours["p_holm"], "p_holm_replicate": theirs["p_holm"],
                     "effect_study": _effect(ours), "effect_replicate": _effect(theirs),
                     "agreement": ours["verdict"] if agree else UNDECIDED, "tested": tested,
                     "warm_starts": warm_starts or np.nan, "seeds_per_arm": seeds or np.nan,
                     "warm_starts_needed": np.ceil(scale * warm_starts) if warm_starts else np.nan,
                     "seeds_needed_per_arm": np.ceil(scale * seeds) if seeds else np.nan})
    return pd.DataFrame(rows, columns=[*COLUMNS, "tested"])


def _need_text(needed: float, agreement: str, tested: bool) -> str:
    if agreement != UNDECIDED:
        return ""
    if not tested:
        return "not tested in one replicate"
    return "no pooled effect" if not np.isfinite(needed) else f"{needed:.0f}"


def markdown(comparison: pd.DataFrame) -> str:
    """The comparison as the snapshot shows it."""
    shown = comparison.copy()
    for column in ("warm_starts_needed", "seeds_needed_per_arm"):
        shown[column] = [_need_text(n, agreement, tested)
                         for n, agreement, tested in zip(shown[column], shown["agreement"], shown["tested"])]
    for column in ("p_holm_study", "p_holm_replicate"):
        shown[column] = [f"{p:.3g}" if np.isfinite(p) else "" for p in shown[column]]
    for column in ("effect_study", "effect_replicate"):
        shown[column] = [f"{e:+.3g}" if np.isfinite(e) else "" for e in shown[column]]
    for column in ("warm_starts", "seeds_per_arm"):
        shown[column] = [f"{n:.0f}" if np.isfinite(n) else "" for n in shown[column]]
    return shown.drop(columns="tested").to_markdown(index=False)
