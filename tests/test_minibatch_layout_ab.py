"""experiments/calibration/minibatch_layout.py: the minibatch-layout A/B's statistics, test and verdict, on
constructed runs."""

import numpy as np
import pandas as pd
import pytest

from run_records import write_run_record
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
    assert f"Verdict: {expected}." in ab.summary_markdown(_frame(shift))


def test_permutation_p_and_interval_bracket_the_difference():
    rng = np.random.default_rng(0)
    separated = _frame(-0.05)
    assert ab.pooled_difference(separated, "length_20_29") == pytest.approx(-0.1, abs=0.02)
    assert ab.permutation_p(separated, "length_20_29", rng) < 0.001
    low, high = ab.bootstrap_interval(separated, "length_20_29", rng)
    assert low < -0.08 and high < 0
    low, high = ab.bootstrap_interval(_frame(0.0), "length_20_29", rng)
    assert low < 0 < high


def _run(root, arm, seed, revision=None, method="gdpo"):
    run = root / arm / "tiny" / "runs" / "math_length" / method / "G8" / f"seed{seed}"
    write_run_record(run, "math_length", method, 8, seed)
    _metrics(lambda s: 0.5).to_parquet(run / "metrics.parquet")
    revision = revision or ("9b9b1b083948982519d33d98f42b075111c0c3e4" if arm == "responses" else "c274a8c" + "0" * 33)
    (run / "git_revision.txt").write_text(f"revision: {revision}\ndirty: false\n")
    return run


def test_collect_refuses_arms_with_different_seeds(tmp_path):
    for arm, seeds in (("responses", (10, 11)), ("groups", (10,))):
        for seed in seeds:
            _run(tmp_path, arm, seed)
    with pytest.raises(ValueError, match="gdpo: the arms trained different seeds"):
        ab.collect(tmp_path)
    _run(tmp_path, "groups", 11)
    assert len(ab.collect(tmp_path)) == 4
    # who a run is comes from its config.yaml: one that names another seed than its folder is refused
    write_run_record(tmp_path / "groups" / "tiny" / "runs" / "math_length" / "gdpo" / "G8" / "seed11", "math_length",
                     "gdpo", 8, 12)
    with pytest.raises(ValueError, match="seed11: config.yaml records seed=12 but its folder says 11"):
        ab.collect(tmp_path)


@pytest.mark.parametrize("arm, revision", [("responses", "c274a8c" + "0" * 33),
                                           ("groups", "9b9b1b083948982519d33d98f42b075111c0c3e4")])
def test_collect_refuses_a_run_of_the_other_arms_revision(tmp_path, arm, revision):
    _run(tmp_path, "responses", 10, revision if arm == "responses" else None)
    _run(tmp_path, "groups", 10, revision if arm == "groups" else None)
    with pytest.raises(ValueError, match=f"seed10 was trained at {revision}"):
        ab.collect(tmp_path)


def test_main_refuses_arms_from_different_warm_starts(tmp_path):
    for arm, weights in (("responses", b"one"), ("groups", b"two")):
        run = _run(tmp_path, arm, 10)
        _metrics(lambda s: 1 / 3).to_parquet(run / "metrics.parquet")  # a length mean with more than 4 decimals
        policy = tmp_path / arm / "tiny" / "policies" / "math_length" / "warm_start0"
        policy.mkdir(parents=True)
        (policy / "model.safetensors").write_bytes(weights)
    with pytest.raises(ValueError, match="different warm starts"):
        ab.main([str(tmp_path), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
    (tmp_path / "groups" / "tiny" / "policies" / "math_length" / "warm_start0" / "model.safetensors").write_bytes(b"one")
    ab.main([str(tmp_path), str(tmp_path / "out")])
    assert "Verdict: not distinguishable" in (tmp_path / "out" / "summary.md").read_text()
    runs_csv = (tmp_path / "out" / "runs.csv").read_text()
    assert len(runs_csv.splitlines()) == 1 + 2  # a header, then one run per arm
    assert all(len(cell.partition(".")[2]) <= 4 for cell in runs_csv.replace("\n", ",").split(","))  # float_format
