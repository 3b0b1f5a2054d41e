"""Crossing steps, seed statistics and the retention rule on small hand-made series."""

import numpy as np
import pandas as pd
import pytest

from dara.analysis.crossing import first_crossing, first_stable_crossing
from dara.analysis.summary import format_mean_sd, mean_sd, retain_runs, seed_band


# first_crossing: unsmoothed, as the tool-calling study counts format 0.8


def test_first_crossing_is_first_step_at_or_above_threshold():
    assert first_crossing([1, 2, 3, 4, 5], [0.1, 0.79, 0.8, 0.5, 0.9], 0.8) == 3


def test_first_crossing_does_not_smooth_a_single_spike():
    assert first_crossing([1, 2, 3, 4], [0.1, 0.95, 0.1, 0.1], 0.8) == 2


def test_first_crossing_never_crossing_is_none():
    assert first_crossing([1, 2, 3], [0.1, 0.2, 0.79999], 0.8) is None


def test_first_crossing_with_missing_steps_reports_logged_step():
    assert first_crossing([1, 2, 10, 20], [0.0, 0.1, 0.85, 0.9], 0.8) == 10


@pytest.mark.parametrize(
    "steps, values, message",
    [
        ([1, 1, 2], [0.1, 0.2, 0.3], "strictly increasing"),
        ([1, 2], [0.1], "differ in length"),
        ([1, 2, 3], [0.1, float("nan"), 0.3], "non-finite values at steps \\[2\\]"),
        ([], [], "empty"),
    ],
)
def test_first_crossing_rejects_bad_series(steps, values, message):
    with pytest.raises(ValueError, match=message):
        first_crossing(steps, values, 0.5)


# first_stable_crossing: 10-step trailing mean that stays above for 20 more steps (the paper's math rule, math/tools/learning_efficiency.py of the authors' release)


def _steps(n):
    return np.arange(1, n + 1)


def test_stable_crossing_brute_force_agrees_with_definition():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(5, 60))
        values = np.clip(np.cumsum(rng.normal(0.05, 0.2, n)), 0, 1)
        threshold = float(rng.uniform(0.2, 0.9))
        window, future = int(rng.integers(1, 6)), int(rng.integers(0, 8))
        trailing = {t: values[t - window : t].mean() for t in range(window, n + 1)}
        expected = None
        for t in range(window, n - future + 1):
            if all(trailing[u] >= threshold for u in range(t, t + future + 1)):
                expected = t
                break
        result = first_stable_crossing(_steps(n), values, threshold, window=window, future=future)
        assert result.step == expected, (trial, n, window, future)
        assert (result.status == "confirmed") == (expected is not None)


def test_stable_crossing_paper_defaults_on_a_step_function():
    # values jump to 1 at step 31; the 10-step mean first reaches 1.0 at step 40 and stays there.
    values = np.where(_steps(100) >= 31, 1.0, 0.0)
    result = first_stable_crossing(_steps(100), values, 0.99)
    assert (result.step, result.status, result.last_step) == (40, "confirmed", 100)


def test_stable_crossing_mean_dipping_inside_confirmation_window_is_not_taken():
    values = np.ones(60)
    values[24] = 0.0  # step 25: the trailing mean is below 0.99 for steps 25..34
    result = first_stable_crossing(_steps(60), values, 0.99)
    # candidates 10..14 would need [t, t+20] clear of 25..34, so the first confirmed step is 35
    assert result.step == 35


def test_stable_crossing_inside_the_last_window_is_pending():
    # crosses at step 40 but the run ends at 55 < 40 + 20: cannot be confirmed yet
    values = np.where(_steps(55) >= 31, 1.0, 0.0)
    result = first_stable_crossing(_steps(55), values, 0.99)
    assert (result.step, result.status) == (None, "pending")


def test_stable_crossing_exactly_at_the_last_confirmable_step():
    values = np.where(_steps(60) >= 31, 1.0, 0.0)
    assert first_stable_crossing(_steps(60), values, 0.99).step == 40  # 40 + 20 == 60


def test_stable_crossing_never_reached():
    result = first_stable_crossing(_steps(80), np.full(80, 0.5), 0.99)
    assert (result.step, result.status) == (None, "not_reached")


def test_stable_crossing_drops_step_zero_and_steps_past_budget():
    steps = np.arange(0, 101)
    values = np.where(steps >= 31, 1.0, 0.0)
    values[0] = 1.0  # step 0 is the pre-training value and must not count
    assert first_stable_crossing(steps, values, 0.99, budget=59).status == "pending"
    assert first_stable_crossing(steps, values, 0.99, budget=60).step == 40


def test_stable_crossing_missing_steps_raise_naming_them():
    steps = [s for s in range(1, 41) if s not in (7, 8)]
    with pytest.raises(ValueError, match=r"missing steps \[7, 8\]"):
        first_stable_crossing(steps, np.ones(len(steps)), 0.5)


def test_stable_crossing_shorter_than_window():
    assert first_stable_crossing(_steps(5), np.ones(5), 0.5).status == "not_reached"


# seed statistics


def _frame(rows):
    return pd.DataFrame(rows, columns=["method", "seed", "step", "value"])


def test_seed_band_median_and_quartiles():
    frame = _frame([("gdpo", seed, 1, value) for seed, value in enumerate([0.0, 1.0, 2.0, 3.0, 4.0])])
    band = seed_band(frame, "value")
    assert band.loc[0, ["median", "q25", "q75", "n_seeds"]].tolist() == [2.0, 1.0, 3.0, 5]


def test_seed_band_single_seed_has_zero_width():
    band = seed_band(_frame([("grpo", 0, 1, 0.3), ("grpo", 0, 2, 0.6)]), "value")
    assert band["median"].tolist() == band["q25"].tolist() == band["q75"].tolist() == [0.3, 0.6]
    assert band["n_seeds"].tolist() == [1, 1]


def test_seed_band_counts_only_seeds_that_logged_the_step():
    frame = _frame([("grpo", 0, 1, 0.1), ("grpo", 1, 1, 0.3), ("grpo", 0, 2, 0.5)])
    band = seed_band(frame, "value").set_index("step")
    assert band.loc[1, "n_seeds"] == 2 and band.loc[2, "n_seeds"] == 1
    assert band.loc[1, "median"] == pytest.approx(0.2)


def test_mean_sd_uses_sample_sd_and_rejects_missing_values():
    frame = _frame([("dara_sym", seed, 100, value) for seed, value in enumerate([1.0, 2.0, 3.0])])
    row = mean_sd(frame, "value", ["method"]).iloc[0]
    assert (row["mean"], row["sd"], row["n"]) == (2.0, 1.0, 3)
    frame.loc[1, "value"] = np.nan
    with pytest.raises(ValueError, match="missing 'value'"):
        mean_sd(frame, "value", ["method"])


def test_format_mean_sd():
    assert format_mean_sd(48.456, 0.364, 5) == "48.46 ± 0.36"
    assert format_mean_sd(48.456, float("nan"), 1) == "48.46 (n=1)"


def test_retention_keeps_runs_at_or_above_threshold_and_reports_dropped():
    runs = pd.DataFrame({"seed": [0, 1, 2, 3], "val_format": [0.8, 0.79, 0.95, 0.06]})
    result = retain_runs(runs, "val_format")
    assert result.retained["seed"].tolist() == [0, 2]
    assert result.dropped["seed"].tolist() == [1, 3]
    assert result.dropped["exclusion_reason"].iloc[1] == "val_format=0.060 < 0.8"
    assert result.summary() == "2 of 4 runs dropped (val_format < 0.8)"


def test_retention_refuses_runs_without_validation_format():
    with pytest.raises(ValueError, match="1 runs have no 'val_format'"):
        retain_runs(pd.DataFrame({"val_format": [0.9, np.nan]}), "val_format")


def test_evaluation_json_must_agree_with_its_path(tmp_path):
    import json

    from dara.analysis.run_tables import load_evaluations

    path = tmp_path / "eval/toolcall/gdpo/G8/seed0/step10.json"
    path.parent.mkdir(parents=True)
    identity = {"task": "toolcall", "method": "gdpo", "group_size": 8}
    path.write_text(json.dumps({**identity, "seed": 1, "metrics": {"bfcl_format": 0.5}}))
    with pytest.raises(ValueError, match="the file records seed=1 but its folder says 0"):
        load_evaluations([path])
    path.write_text(json.dumps({**identity, "seed": 0, "step": 10, "metrics": {"bfcl_format": 0.5}, "note": "x"}))
    row = load_evaluations([path]).iloc[0]
    assert (row["seed"], row["G"], row["step"], row["metrics/bfcl_format"]) == (0, 8, 10, 0.5)
    assert "note" not in row.index
    path.write_text(json.dumps({**identity, "seed": 0, "step": 20, "metrics": {"bfcl_format": 0.5}}))
    with pytest.raises(ValueError, match="step=20 in the file but 10 in its name"):
        load_evaluations([path])
    path.write_text(json.dumps({"seed": 0, "metrics": {"bfcl_format": 0.5}}))  # half a record
    with pytest.raises(ValueError, match="names seed of its run but not task, method, group_size"):
        load_evaluations([path])
    # a model's folder <task>-<model> holds evaluations of <task> (the CPU evaluation of verl_cpu's runs)
    with_model = tmp_path / "eval/math_length-tiny_math/gdpo/G4/seed0/step20.json"
    with_model.parent.mkdir(parents=True)
    with_model.write_text(json.dumps({"task": "math_length", "method": "gdpo", "group_size": 4, "seed": 0,
                                      "metrics": {"accuracy": 0.25}}))
    assert load_evaluations([with_model]).iloc[0]["task"] == "math_length-tiny_math"
    for wrong in ("toolcall", "math"):
        with_model.write_text(json.dumps({"task": wrong, "method": "gdpo", "group_size": 4, "seed": 0,
                                          "metrics": {"accuracy": 0.25}}))
        with pytest.raises(ValueError, match=f"the file records task='{wrong}' but its folder says 'math_length'"):
            load_evaluations([with_model])


def test_inputs_select_a_task_and_refuse_to_pool_models():
    from dara.analysis.cli import _select

    frame = pd.DataFrame({"task": ["toolcall", "toolcall3", "math_length"], "x": [1, 2, 3]})
    assert _select(frame, "toolcall")["x"].tolist() == [1]
    paper = pd.DataFrame({"task": ["toolcall-qwen2.5-1.5b", "toolcall-qwen2.5-3b"], "x": [1, 2]})
    assert _select(paper.iloc[:1], "toolcall")["x"].tolist() == [1]
    with pytest.raises(ValueError, match="several models of 'toolcall'"):
        _select(paper, "toolcall")
    assert _select(paper, "toolcall", primary="qwen2.5-3b")["x"].tolist() == [2]
    with pytest.raises(ValueError, match="primary model 'qwen2.5-7b'"):
        _select(paper, "toolcall", primary="qwen2.5-7b")
    assert _select(frame, "act_critic") is None
