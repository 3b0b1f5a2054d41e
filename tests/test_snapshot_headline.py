"""The README's headline block, first_crossing.md and the claims summarise the same runs with one rule
(dara.analysis.crossing.crossing_summary: the Kaplan-Meier median), for the task, reward and threshold
analysis/config.yaml names."""

import re
import runpy
from pathlib import Path

import numpy as np
import pandas as pd

from dara.analysis.claims import claims_frame
from dara.analysis.config import load_analysis_config
from dara.analysis.crossing import crossing_records, crossing_summary
from dara.analysis.paper_comparison import headline_claims
from dara.analysis.paper_reference import PaperReference

REPO = Path(__file__).resolve().parents[1]
CONFIG = load_analysis_config(REPO / "analysis" / "config.yaml", "tiny")


def _headline_table():
    return runpy.run_path(str(REPO / "analysis" / "snapshot.py"))["headline_table"]


def test_headline_block_uses_the_first_crossing_summary(tmp_path):
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
    text = _headline_table()(tmp_path, CONFIG)
    assert "median steps to cross, Kaplan-Meier (q25-q75)" in text  # the header names which median
    expected = crossing_summary(records[records["threshold"] == 0.8], by=("method", "G")).set_index("method")
    gdpo = expected.loc["gdpo"]
    assert f"| GDPO | 4 | 5 | 4 | {gdpo['km_median']:g} ({gdpo['km_q25']:g}-{gdpo['km_q75']:g}) |" in text
    sym = expected.loc["dara_sym"]
    assert f"| DARA-Sym | 4 | 5 | 5 | {sym['km_median']:g} ({sym['km_q25']:g}-{sym['km_q75']:g}) |" in text
    assert "-2 [-3, -1] | 0.01 | 0.03 | supported" in text and "something else" not in text


def _metrics(first_steps: dict[str, list], n_steps: int = 30) -> pd.DataFrame:
    """A metrics frame of toolcall runs at G=4 whose format reward jumps from 0.1 to 0.9 at each run's given step
    (None: never); row 0, the starting policy, already scores 0.9, which no crossing may count."""
    rows = []
    for method, steps in first_steps.items():
        for seed, first in enumerate(steps):
            for step in range(n_steps + 1):
                reached = step == 0 or (first is not None and step >= first)
                rows.append({"task": "toolcall", "method": method, "G": 4, "seed": seed, "step": step,
                             "reward/format": 0.9 if reached else 0.1})
    return pd.DataFrame(rows)


def test_the_headline_and_the_claims_give_the_same_median_of_the_same_runs(tmp_path):
    # four seeds an arm, so numpy's median (the mean of the two middle seeds) and Kaplan-Meier's differ: DARA-Sym
    # 10.5 vs 9, GDPO 12 vs 11 (its never-crossing seed censored at step 30)
    metrics = _metrics({"dara_sym": [8, 9, 12, 20], "gdpo": [10, 11, 13, None]})
    crossings = crossing_records(metrics, {"format": [0.8]})
    crossings.to_csv(tmp_path / "first_crossing.csv", index=False)
    claims = headline_claims(crossings, None, None, None, CONFIG, PaperReference(REPO / "analysis" / "reference"))
    claims_frame(claims).to_csv(tmp_path / "claims.csv", index=False)

    headline = _headline_table()(tmp_path, CONFIG)
    shown = {label: float(median) for label, median in re.findall(r"^\| (DARA-Sym|GDPO) \| 4 \| 4 \| \d \| ([\d.]+) ",
                                                                  headline, re.M)}
    claim = next(c for c in claims if c.claim == "DARA-Sym reaches format 0.8 on toolcall (G=4) in fewer steps "
                                                 "than GDPO")
    in_claim = re.search(r"KM median step ([\d.]+) vs ([\d.]+)", claim.ours)
    assert shown == {"DARA-Sym": 9.0, "GDPO": 11.0}
    assert (float(in_claim[1]), float(in_claim[2])) == (shown["DARA-Sym"], shown["GDPO"])


def test_a_replicates_table_kept_from_an_earlier_snapshot_names_its_draw(tmp_path):
    """A snapshot without a replicate of its own keeps the previous replicates table; its study column is the
    earlier draw's, so a line on top says which draw (from the REVISION file it came with), once."""
    mark = runpy.run_path(str(REPO / "analysis" / "snapshot.py"))["mark_earlier_draw"]
    table, revision = tmp_path / "replicates.md", tmp_path / "REVISION"
    table.write_text("# Claims in two independent replicates\n\n13 of 14 claims agree.\n\n| claim |\n|:--|\n| a |\n")
    revision.write_text("# training runs\nrevision: 3c491edb695f753c11d9753c43cf6cbaf32505a1\ndirty: false\n")
    mark(table, revision)
    text = table.read_text()
    assert text.startswith("# Claims in two independent replicates\n\n**Not this draw's replicate:**")
    assert "the draw of training runs at 3c491ed" in text and text.endswith("| a |\n")
    mark(table, revision)  # a second snapshot without a replicate leaves it as it is
    assert table.read_text() == text
