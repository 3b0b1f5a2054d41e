"""The side-by-side table (analysis/backends.py): medians over seeds and each seed's crossing, in seed order."""

import numpy as np
import pandas as pd
from script_loader import load_script


def _runs(verl_steps, tiny_steps):
    rows = []
    for seed, (verl, tiny) in enumerate(zip(verl_steps, tiny_steps)):
        rows.append({"task": "toolcall", "reward": "format", "threshold": 0.8, "method": "gdpo", "G": 4,
                     "seed": seed, "verl/crossing_step": verl, "verl/final": 0.5 + seed / 10, "verl/last_step": 20,
                     "tiny/crossing_step": tiny, "tiny/final": 0.9, "tiny/last_step": 20})
    return pd.DataFrame(rows)


def test_each_seed_is_listed_in_seed_order_and_never_counts_as_later_than_any_step():
    # rows out of seed order, as a merge may leave them
    runs = _runs([12.0, np.nan, 5.0], [7.0, 9.0, 8.0]).iloc[[2, 0, 1]]
    table = load_script("analysis/backends.py").summary_table(runs, ["verl", "tiny"])
    row = table.iloc[0]
    assert row["verl crossing (each seed)"] == "12, never, 5"
    # Kaplan-Meier (dara.analysis.crossing), the never-crossing seed censored at its last step: 5, 12, never
    assert row["verl crossing (median (Kaplan-Meier))"] == "12"
    assert row["tiny crossing (each seed)"] == "7, 9, 8"
    assert row["tiny crossing (median (Kaplan-Meier))"] == "8"
    assert row["verl seeds"] == 3 and row["verl final (median)"] == 0.6


def test_a_seed_that_one_backend_did_not_run_is_left_out_of_its_columns():
    runs = _runs([4.0, 6.0], [3.0, 5.0])
    runs.loc[1, ["tiny/crossing_step", "tiny/final", "tiny/last_step"]] = np.nan
    row = load_script("analysis/backends.py").summary_table(runs, ["verl", "tiny"]).iloc[0]
    assert row["tiny seeds"] == 1 and row["tiny crossing (each seed)"] == "3"
    assert row["verl seeds"] == 2 and row["verl crossing (each seed)"] == "4, 6"
    # the first step by which half the runs crossed, not numpy's 5 between them
    assert row["verl crossing (median (Kaplan-Meier))"] == "4"
