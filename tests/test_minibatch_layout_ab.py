"""experiments/calibration/minibatch_layout.py: the minibatch-layout A/B's statistics, test and verdict, on
constructed runs."""

import numpy as np
import pandas as pd
import pytest

from script_loader import load_script

ab = load_script("experiments/calibration/minibatch_layout.py")


def _metrics(length_by_step, steps=40):
    return pd.DataFrame({"step": range(steps), "reward/length": [length_by_step(s) for s in range(steps)],
                         "reward/correctness": [0.9] * steps, "seconds": [0.5] * steps})


def test_run_statistics_reads_the_window_and_the_first_crossing():
    found = ab.run_statistics(_metrics(lambda s: s / 40))
    assert found["length_20_29"] == pytest.approx(np.mean(np.arange(20, 30)) / 40)
    assert found["first_length_0.8"] == 32 and found["length_last"] == pytest.approx(39 / 40)
    assert found["step_seconds"] == pytest.approx(20.0)
    assert np.isnan(ab.run_statistics(_metrics(lambda s: 0.5))["first_length_0.8"])
    with pytest.raises(ValueError, match=r"no metrics at steps \[25, 26"):
        ab.run_statistics(_metrics(lambda s: 0.5, steps=25))


def _frame(shift, seeds=10, methods=("gdpo", "dara_sym")):
    rng = np.random.default_rng(1)
    rows = []
    for method in methods:
        for arm in ab.ARMS:
            for seed in range(seeds):
                value = 0.7 + rng.normal(0, 0.02) + (shift if arm == "groups" else 0.0)
                rows.append({"arm": arm, "method": method, "seed": seed, "length_20_29": value,
                             "correctness_20_29": 0.9, "first_length_0.8": 25.0, "length_last": 0.9,
                             "step_seconds": 20.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("shift, expected", [(-0.05, "whole-group minibatches learn length later"),
                                             (0.05, "whole-group minibatches learn length earlier"),
                                             (0.0, "not distinguishable at this many seeds")])
def test_the_verdict_follows_the_pooled_permutation_test(shift, expected):
    text = ab.summary_markdown(_frame(shift), same_warm_start=True)
    assert f"Verdict: {expected}." in text
    assert "same warm start (weights' bytes equal): yes" in text


def test_permutation_p_and_interval_bracket_the_difference():
    rng = np.random.default_rng(0)
    separated = _frame(-0.05)
    assert ab.pooled_difference(separated, "length_20_29") == pytest.approx(-0.1, abs=0.02)
    assert ab.permutation_p(separated, "length_20_29", rng) < 0.001
    low, high = ab.bootstrap_interval(separated, "length_20_29", rng)
    assert low < -0.08 and high < 0
    low, high = ab.bootstrap_interval(_frame(0.0), "length_20_29", rng)
    assert low < 0 < high


def test_collect_refuses_arms_with_different_seeds(tmp_path):
    for arm, seeds in (("responses", (10, 11)), ("groups", (10,))):
        for seed in seeds:
            run = tmp_path / arm / "tiny" / "runs" / "math_length" / "gdpo" / "G8" / f"seed{seed}"
            run.mkdir(parents=True)
            _metrics(lambda s: 0.5).to_parquet(run / "metrics.parquet")
    with pytest.raises(ValueError, match="gdpo: the arms trained different seeds"):
        ab.collect(tmp_path)
    (tmp_path / "groups" / "tiny" / "runs" / "math_length" / "gdpo" / "G8" / "seed11").mkdir()
    _metrics(lambda s: 0.5).to_parquet(tmp_path / "groups/tiny/runs/math_length/gdpo/G8/seed11/metrics.parquet")
    assert len(ab.collect(tmp_path)) == 4
