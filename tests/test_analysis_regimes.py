"""The denser-regime contrast (dara.analysis.regimes) on constructed crossing tables, where the answer is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dara.analysis.regimes import regime_contrast, regime_markdown

SETTINGS = dict(sparse_task="toolcall", dense_task="toolcall_dense", method="dara_sym", baseline="gdpo",
                reward="format", threshold=0.8, group_size=4, scale="tiny")


def _records(task: str, steps: dict[str, list], warm_starts: int = 5, last_step: int = 29) -> pd.DataFrame:
    """Crossing records with ``steps[method]`` cycled over seeds; seed s trains from warm start s % warm_starts."""
    rows = []
    for method, values in steps.items():
        for seed, step in enumerate(values):
            rows.append({"task": task, "method": method, "G": 4, "seed": seed, "warm_start": seed % warm_starts,
                         "reward": "format", "threshold": 0.8, "step": step, "last_step": last_step})
    return pd.DataFrame(rows)


def _metrics(task: str, density: float, weight: float) -> pd.DataFrame:
    rows = [{"task": task, "method": method, "G": 4, "seed": seed, "warm_start": seed % 5, "step": 0,
             "density/format": density, "weight/format": weight if method == "dara_sym" else 1.0}
            for method in ("gdpo", "dara_sym") for seed in range(10)]
    return pd.DataFrame(rows)


OFFSETS = [-1.0, 0.0, 1.0, 2.0, -2.0]
# the same offsets paired with other warm starts: one step earlier in two warm starts, later in two, equal in one
SWAPPED = [0.0, -1.0, 2.0, 1.0, -2.0]


def _jitter(center: float, offsets=OFFSETS) -> list[float]:
    """Ten steps around ``center`` (median ``center``), seed s with ``offsets[s % 5]``."""
    return [center + offset for offset in offsets * 2]


def _contrast(sparse: dict, dense: dict):
    crossings = pd.concat([_records("toolcall", sparse), _records("toolcall_dense", dense)])
    metrics = pd.concat([_metrics("toolcall", 0.06, 3.9), _metrics("toolcall_dense", 0.25, 1.6)])
    return regime_contrast(crossings, metrics, **SETTINGS)


def test_a_lead_that_vanishes_where_the_reward_is_dense_supports_the_prediction():
    result = _contrast({"dara_sym": _jitter(10), "gdpo": _jitter(20)}, {"dara_sym": _jitter(12), "gdpo": _jitter(12, SWAPPED)})
    assert result.verdict == "supported"
    assert result.contrast == pytest.approx(10.0)
    assert 0 < result.low <= 10 <= result.high
    sparse, dense = result.rows.set_index("regime").loc["sparse"], result.rows.set_index("regime").loc["dense"]
    assert sparse["format density, step 0"] == pytest.approx(0.06) and dense["format density, step 0"] == pytest.approx(0.25)
    assert sparse["DARA-Sym weight on format, step 0"] == pytest.approx(3.9)
    assert sparse["verdict (alone)"] == "supported" and dense["verdict (alone)"] == "not significant"


def test_a_lead_that_grows_where_the_reward_is_dense_refutes_it():
    result = _contrast({"dara_sym": _jitter(15), "gdpo": _jitter(17)}, {"dara_sym": _jitter(5), "gdpo": _jitter(20)})
    assert result.verdict == "refuted" and result.high < 0


def test_equal_leads_are_not_significant():
    result = _contrast({"dara_sym": _jitter(10), "gdpo": _jitter(15)}, {"dara_sym": _jitter(11), "gdpo": _jitter(16)})
    assert result.verdict == "not significant" and result.low <= 0 <= result.high


def test_without_the_dense_runs_the_contrast_is_not_testable_and_says_which():
    crossings = _records("toolcall", {"dara_sym": _jitter(10), "gdpo": _jitter(20)})
    result = regime_contrast(crossings, _metrics("toolcall", 0.06, 3.9), **SETTINGS)
    assert result.verdict.startswith("not testable") and "toolcall_dense" in result.verdict
    assert np.isnan(result.contrast)
    text = regime_markdown(result, method="dara_sym", baseline="gdpo", reward="format", threshold=0.8)
    assert "not testable" in text and "outside the Holm family" in text
