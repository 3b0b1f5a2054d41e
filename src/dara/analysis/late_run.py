"""A run's late regime: how dense each reward is over the last third of a run, and the weight DARA gives it there.

The paper's math mechanism lives late in a run: correctness stays dense while the length reward, near saturation,
varies in few groups, so DARA's weight on it rises (the cap binds from step 48-62 in the paper's energy plots).
These numbers say whether a run was in that regime. The pilots read them from GDPO runs to predict DARA's late
weights without running DARA (`dara.pilot`); the regime table reads them from every method's runs
(analysis/regime.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from dara.advantages import density_weights


def last_third(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of one run after two thirds of its last step (``step > 2 last / 3``)."""
    last_step = int(metrics["step"].max())
    return metrics[metrics["step"] > 2 * last_step / 3]


def late_run_numbers(metrics: pd.DataFrame, rewards: tuple[str, ...] | list[str], w_max: float) -> dict[str, float]:
    """Per reward: ``mean_mid/<r>``, the batch mean at the middle step (``last // 2``), and over the run's last
    third ``density_last_third/<r>`` (median density), ``active_last_third/<r>``
    (share of those steps where it varies in some group) and ``weight_last_third/<r>``, DARA's weight
    ``min(w_max, sqrt(max_j pi_j / pi_k))`` from each step's densities, median over the steps where the reward
    varies (at density 0 the weight multiplies zero z-scores: its value, 1 by our convention and the paper's math
    stack, has no effect, so it is left out; NaN when the reward never varies there). Empty for a run shorter than
    three steps (a step-0 screen has no last third)."""
    if int(metrics["step"].max()) < 3:
        return {}
    late = last_third(metrics)
    middle = metrics[metrics["step"] == int(metrics["step"].max()) // 2]
    densities = late[[f"density/{reward}" for reward in rewards]].to_numpy(dtype=np.float64)
    weights = np.stack([density_weights(torch.tensor(row.copy()), w_max).numpy() for row in densities])
    out: dict[str, float] = {}
    for k, reward in enumerate(rewards):
        active = densities[:, k] > 0
        out[f"mean_mid/{reward}"] = float(middle[f"reward/{reward}"].iloc[0]) if len(middle) else np.nan
        out[f"density_last_third/{reward}"] = float(np.median(densities[:, k]))
        out[f"active_last_third/{reward}"] = float(active.mean())
        out[f"weight_last_third/{reward}"] = float(np.median(weights[active, k])) if active.any() else np.nan
    return out
