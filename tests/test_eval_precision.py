"""experiments/calibration/eval_precision.py: criterion 3 read per warm start and on the median warm start, for the
pipeline's reading and the new one, on constructed readings."""

from __future__ import annotations

import pandas as pd
from script_loader import load_script

eval_precision = load_script("experiments/calibration/eval_precision.py")


def _readings(pipeline: dict[int, list[float]], again: dict[int, list[float]]) -> pd.DataFrame:
    rows = [{"task": "toolcall", "method": "shuffled", "warm_start": start, "pipeline_samples": 1,
             "pipeline_minus_base": old, "minus_base": new}
            for start in pipeline for old, new in zip(pipeline[start], again[start])]
    return pd.DataFrame(rows)


def test_the_median_over_warm_starts_of_each_warm_starts_median_is_read_against_the_bound():
    # per warm start medians: pipeline -6, -5.5, +1 -> median -5.5 (missed); again -4, -3, +2 -> -3 (met)
    frame = _readings({0: [-7, -5, -6], 1: [-5.5, -5.5, -9], 2: [1, 1, 30]},
                      {0: [-4, -4, -1], 1: [-3, -3, -20], 2: [2, 2, 2]})
    [row] = eval_precision.criterion_rows(frame)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells == ["toolcall", "shuffled", "1", "-6.0 -5.5 +1.0", "-5.50", "missed", "-4.0 -3.0 +2.0", "-3.00", "met"]


def test_a_gain_beyond_the_bound_misses_it_too_and_the_bound_is_inclusive():
    frame = _readings({0: [5.0]}, {0: [5.01]})
    [row] = eval_precision.criterion_rows(frame)
    assert row.split("|")[6].strip() == "met" and row.split("|")[9].strip() == "missed"
