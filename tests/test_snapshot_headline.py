"""The README's headline block and first_crossing.md summarise the same runs with one rule
(dara.analysis.tables.crossing_summary), for the task, reward and threshold analysis/config.yaml names."""

import runpy
from pathlib import Path

import numpy as np
import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.analysis.tables import crossing_summary

REPO = Path(__file__).resolve().parents[1]


def test_headline_block_uses_the_first_crossing_summary(tmp_path):
    snapshot = runpy.run_path(str(REPO / "analysis" / "snapshot.py"))
    config = load_analysis_config(REPO / "analysis" / "config.yaml", "tiny")
    steps = {"gdpo": [10, 11, 13, 14, np.nan], "dara_sym": [8, 9, 9, 12, 20]}
    records = pd.DataFrame([
        {"task": "toolcall", "method": method, "G": 4, "seed": seed, "reward": "format", "threshold": 0.8,
         "step": step, "last_step": 30}
        for method, values in steps.items() for seed, step in enumerate(values)]
        # another reward and threshold must not leak into the headline
        + [{"task": "toolcall", "method": "gdpo", "G": 4, "seed": 9, "reward": "format", "threshold": 0.9,
            "step": 1, "last_step": 30}])
    records.to_csv(tmp_path / "first_crossing.csv", index=False)
    pd.DataFrame([{"claim": "DARA-Sym reaches format 0.8 on toolcall (G=4) in fewer steps than GDPO", "ours": "x",
                   "median_difference": -2.0, "ci_low": -3.0, "ci_high": -1.0, "p_raw": 0.01, "p_holm": 0.03,
                   "verdict": "supported"},
                  {"claim": "something else", "ours": "y", "median_difference": np.nan, "ci_low": np.nan,
                   "ci_high": np.nan, "p_raw": np.nan, "p_holm": np.nan, "verdict": "not testable"}]).to_csv(
        tmp_path / "claims.csv", index=False)
    text = snapshot["headline_table"](tmp_path, config)
    expected = crossing_summary(records[records["threshold"] == 0.8], by=("method", "G")).set_index("method")
    gdpo = expected.loc["gdpo"]
    assert f"| GDPO | 4 | 5 | 4 | {gdpo['median']:g} ({gdpo['q25']:g}-{gdpo['q75']:g}) |" in text
    sym = expected.loc["dara_sym"]
    assert f"| DARA-Sym | 4 | 5 | 5 | {sym['median']:g} ({sym['q25']:g}-{sym['q75']:g}) |" in text
    assert "-2 [-3, -1] | 0.01 | 0.03 | supported" in text and "something else" not in text
