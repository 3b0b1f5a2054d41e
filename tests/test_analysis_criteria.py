"""The calibration's regime criteria read on a draw's tables, and two draws' readings side by side."""

import numpy as np
import pandas as pd
import pytest
import yaml

from dara.analysis import criteria
from dara.analysis.config import load_analysis_config
from script_loader import ROOT, load_script

BOUNDS = {
    "sparse_reward_starved": {"task": "toolcall", "sparse_reward": "format", "density": {"max": 0.15},
                              "gdpo_share": {"max": 0.10}, "dara_weight": {"min": 3}},
    "headroom": {"task": "toolcall", "dense_reward": "correctness", "base": {"max": 40}, "dense_density": {"min": 0.5},
                 "methods": ["gdpo", "dara_sym"], "gain": {"min": 10}},
    "no_drift": {"points": [-5, 5]},
    "math": {"task": "math_length", "correctness_reward": "correctness", "length_reward": "length", "base": [30, 70],
             "correctness_density": {"min": 0.5}, "length_step0": [0.2, 0.5], "gdpo_length_middle": {"min": 0.95},
             "length_density_last_third": {"max": 0.2}, "dara_weight_last_third": {"min": 2},
             "confirmed_share": {"min": 0.5}, "final_minus_base": {"min": -5}, "skipped_step": {"max": 0}},
    "measurable": {"task": "toolcall", "reward": "format", "threshold": 0.8, "crossed_share": {"min": 0.5}},
}
CONFIG = {"regime_criteria": BOUNDS, "stable_crossing": {"claim_threshold": 0.99},
          "heldout_correctness": {"toolcall": "acc_tool", "math_length": "accuracy"}}


def _regime(changes: dict | None = None) -> pd.DataFrame:
    """A regime.csv of one draw that meets every criterion (one warm start per task: pooled readings); ``changes``
    maps (table, task, method or reward or "method/reward" or "*" for all, column) to a new value."""
    rows = [
        {"table": "step0", "task": "toolcall", "reward": "format", "density_step0": 0.04, "dara_weight_step0": 3.5,
         "gdpo_energy_share_step0": 0.05},
        {"table": "step0", "task": "toolcall", "reward": "correctness", "density_step0": 0.7,
         "dara_weight_step0": 1.0, "gdpo_energy_share_step0": 0.95},
        {"table": "step0", "task": "math_length", "reward": "correctness", "density_step0": 1.0},
        *({"table": "heldout", "task": "toolcall", "method": method, "base": 20.0, "median_minus_base": gain}
          for method, gain in (("gdpo", 30.0), ("dara_sym", 35.0), ("shuffled", -3.0))),
        *({"table": "heldout", "task": "math_length", "method": method, "base": 65.0, "median_minus_base": gain,
           "skipped_step_final": 0.0, "skipped_step_final_max": 0.0}
          for method, gain in (("gdpo", 30.0), ("dara_sym", 31.0), ("shuffled", 4.0))),
        {"table": "training", "task": "math_length", "method": "gdpo", "reward": "length", "step0": 0.3},
        {"table": "late_run", "task": "math_length", "method": "gdpo", "reward": "length", "mean_middle_step": 0.99,
         "density_last_third": 0.05, "weight_last_third": 3.0},
        *({"table": "late_run", "task": "math_length", "method": method, "reward": "length",
           "mean_middle_step": 0.99, "density_last_third": 0.04, "weight_last_third": 3.0}
          for method in ("dara_sym", "dara_asym")),
        *({"table": "late_run", "task": "math_length", "method": method, "reward": "correctness",
           "density_last_third": density} for method, density in (("gdpo", 0.6), ("dara_sym", 0.55),
                                                                   ("shuffled", 0.1))),
    ]
    frame = pd.DataFrame(rows)
    for (table, task, which, column), value in (changes or {}).items():
        match = (frame["table"] == table) & (frame["task"] == task)
        if which == "*":  # every row of the table and task (a task's base, which each method's row repeats)
            frame.loc[match, column] = value
            continue
        if "/" in which:  # "method/reward" where a table has both
            method, reward = which.split("/")
            match &= (frame["method"] == method) & (frame["reward"] == reward)
        else:
            match &= (frame["method"] == which) | (frame["reward"] == which)
        assert match.sum() == 1, (table, task, which)
        frame.loc[match, column] = value
    return frame


def _crossings(crossed: int, of: int = 4) -> pd.DataFrame:
    """GDPO's format crossings at G = 4 (crossed of ``of`` seeds) and a group-size sweep at G = 8 where all cross."""
    rows = [{"task": "toolcall", "method": "gdpo", "G": 4, "seed": s, "reward": "format", "threshold": 0.8,
             "step": 10.0 if s < crossed else np.nan} for s in range(of)]
    rows += [{"task": "toolcall", "method": "dara_sym", "G": 4, "seed": s, "reward": "format", "threshold": 0.8,
              "step": 9.0} for s in range(of)]
    rows += [{"task": "toolcall", "method": "gdpo", "G": 8, "seed": s, "reward": "format", "threshold": 0.8,
              "step": 5.0} for s in range(2)]
    return pd.DataFrame(rows)


def _stable(confirmed: int, of: int = 4) -> pd.DataFrame:
    """GDPO's stable length crossings at G = 8 (``confirmed`` of ``of`` seeds at 0.99, all at 0.95), and two seeds
    at G = 16 (fewer runs: not the main G) that confirm 0.99."""
    rows = [{"task": "math_length", "method": "gdpo", "G": 8, "seed": s, "reward": "length", "threshold": threshold,
             "status": "confirmed" if s < confirmed or threshold < 0.99 else "pending"}
            for s in range(of) for threshold in (0.95, 0.99)]
    rows += [{"task": "math_length", "method": "gdpo", "G": 16, "seed": s, "reward": "length", "threshold": 0.99,
              "status": "confirmed"} for s in range(2)]
    return pd.DataFrame(rows)


def _read(regime=None, crossings=None, stable=None) -> pd.DataFrame:
    return criteria.read_criteria(_regime() if regime is None else regime,
                                  _crossings(3) if crossings is None else crossings,
                                  _stable(3) if stable is None else stable, CONFIG)


def _met(table: pd.DataFrame, reading_part: str, task: str | None = None) -> bool | None:
    rows = table[table["reading"].str.contains(reading_part, regex=False)]
    if task is not None:
        rows = rows[rows["task"] == task]
    assert len(rows) == 1, (reading_part, rows)
    met = rows["met"].iloc[0]
    return None if pd.isna(met) else bool(met)


def test_a_draw_in_the_regime_meets_every_reading():
    table = _read()
    assert list(table.columns) == criteria.COLUMNS
    assert table["met"].tolist() == [True] * len(table)
    # every criterion is read: 3 + 4 + 2 drift controls + 12 math + 1
    assert table["criterion"].str[0].value_counts().sort_index().tolist() == [3, 4, 2, 12, 1]
    assert criteria.summary(table).startswith(f"{len(table)} of {len(table)} readings meet their criterion.")


@pytest.mark.parametrize("change, reading, task", [
    ((("step0", "toolcall", "format", "density_step0"), 0.2), "format density at step 0", None),
    ((("step0", "toolcall", "format", "gdpo_energy_share_step0"), 0.11), "GDPO's share of format", None),
    ((("step0", "toolcall", "format", "dara_weight_step0"), 2.99), "DARA's weight on format", None),
    ((("heldout", "toolcall", "*", "base"), 40.5), "base held-out acc_tool", None),
    ((("step0", "toolcall", "correctness", "density_step0"), 0.45), "correctness density at step 0", "toolcall"),
    ((("heldout", "toolcall", "dara_sym", "median_minus_base"), 9.9), "DARA-Sym's final minus base", None),
    ((("heldout", "toolcall", "shuffled", "median_minus_base"), -5.1), "drift control", "toolcall"),
    ((("heldout", "math_length", "shuffled", "median_minus_base"), 5.2), "drift control", "math_length"),
    ((("heldout", "math_length", "*", "base"), 71.0), "base held-out accuracy (%)", None),
    ((("step0", "math_length", "correctness", "density_step0"), 0.4), "correctness density at step 0",
     "math_length"),
    ((("late_run", "math_length", "dara_sym/length", "density_last_third"), 0.3), "DARA-Sym's length density", None),
    ((("late_run", "math_length", "dara_asym/length", "weight_last_third"), 1.9), "DARA-Asym's weight on length", None),
    ((("late_run", "math_length", "gdpo/length", "mean_middle_step"), 0.9), "at the middle step", None),
    ((("training", "math_length", "gdpo", "step0"), 0.55), "GDPO's length reward at step 0", None),
    ((("heldout", "math_length", "dara_sym", "median_minus_base"), -6.0), "final minus base held-out accuracy",
     None),
    # one run of GDPO skips a step in 0.1 % of its answers, its median run none: not met (no answer may skip)
    ((("heldout", "math_length", "gdpo", "skipped_step_final_max"), 0.1), "skipping a step", None),
])
def test_each_reading_fails_alone_when_its_number_leaves_the_bound(change, reading, task):
    (key, value), = [change]
    table = _read(_regime({key: value}))
    assert _met(table, reading, task) is False
    assert (table["met"] == False).sum() == 1  # noqa: E712 (only that reading moved)
    assert "not met: " in criteria.summary(table)


def test_bounds_are_inclusive_and_the_lowest_method_is_named():
    table = _read(_regime({("heldout", "math_length", "shuffled", "median_minus_base"): 5.0,
                             ("step0", "toolcall", "format", "dara_weight_step0"): 3.0}))
    assert _met(table, "drift control", "math_length") and _met(table, "DARA's weight on format")
    lowest = table[table["reading"].str.contains("correctness density in the last third")].iloc[0]
    assert lowest["value"] == 0.55 and lowest["extreme_method"] == "DARA-Sym"  # the control is not a method here
    skipped = table[table["reading"].str.contains("skipping a step")].iloc[0]
    assert skipped["extreme_method"] == "every method (2)"


def test_a_task_with_several_warm_starts_is_read_on_the_median_warm_start():
    per_warm_start = pd.DataFrame([{"table": "warm_starts", "task": "math_length", "warm_start": w,
                                    "quantity": "Shuffled (control) final minus base (points, median)", "value": v}
                                   for w, v in enumerate((-12.0, -9.0, -8.0, 1.0, 12.0))])
    # the pooled median (4) would meet the bound; the median warm start (-8) does not
    table = _read(pd.concat([_regime(), per_warm_start], ignore_index=True))
    drift = table[(table["task"] == "math_length") & table["reading"].str.contains("drift")].iloc[0]
    assert drift["value"] == -8.0 and not drift["met"] and drift["read_on"] == criteria.MEDIAN_OVER_WARM_STARTS


def test_crossing_shares_are_read_at_the_main_group_size_and_the_claims_threshold():
    table = _read(crossings=_crossings(1), stable=_stable(1))
    crossed = table[table["criterion"] == "5 measurable"].iloc[0]
    assert crossed["value"] == 0.25 and not crossed["met"]  # the G = 8 sweep, all crossed, is not read
    confirmed = table[table["reading"].str.contains("confirming a stable 0.99")].iloc[0]
    assert confirmed["value"] == 0.25 and not confirmed["met"]  # 0.95, confirmed by all, is not read
    assert _met(_read(crossings=_crossings(2), stable=_stable(2)), "confirming a stable")  # half: met


def test_a_reading_this_draw_cannot_make_is_a_row_that_says_so():
    regime = _regime()
    regime = regime[~((regime["table"] == "heldout") & (regime["method"] == "dara_sym"))]
    table = _read(regime, crossings=_crossings(0).iloc[0:0], stable=_stable(0).iloc[0:0])
    unread = table[table["met"].isna()]
    assert "DARA-Sym's final minus base (points)" in unread["reading"].tolist()
    assert any("no DARA-Sym runs evaluated on toolcall" in text for text in unread["read_on"])
    assert {"5 measurable"} <= set(unread["criterion"]) and len(table) == len(_read())
    assert "not read (this draw lacks their runs)" in criteria.summary(table)
    assert "not read" in criteria.markdown(table)


def test_ambiguous_regime_rows_raise():
    regime = _regime()
    clash = regime[(regime["table"] == "step0") & (regime["reward"] == "format")].assign(density_step0=0.9)
    with pytest.raises(ValueError, match="several density_step0 values"):
        _read(pd.concat([regime, clash], ignore_index=True))


def test_two_draws_side_by_side():
    replicate = _read(_regime({("heldout", "math_length", "shuffled", "median_minus_base"): -9.0,
                                 ("step0", "toolcall", "format", "dara_weight_step0"): 1.0}),
                      crossings=_crossings(0).iloc[0:0])
    study = _read(_regime({("step0", "toolcall", "format", "dara_weight_step0"): 2.0}))
    paired = criteria.compare_draws(study, replicate)
    agreement = dict(zip(paired["task"] + ": " + paired["reading"], paired["agreement"]))
    assert agreement["math_length: drift control's final minus base (points)"] == criteria.ONE_OF_TWO
    assert agreement["toolcall: DARA's weight on format at step 0"] == criteria.NEITHER_MET
    assert agreement["toolcall: format density at step 0"] == criteria.BOTH_MET
    assert paired.loc[paired["criterion"] == "5 measurable", "agreement"].item() == criteria.UNREAD_IN_ONE
    both_unread = criteria.compare_draws(replicate, replicate)
    assert both_unread.loc[both_unread["criterion"] == "5 measurable", "agreement"].item() == criteria.UNREAD_IN_BOTH
    text = criteria.paired_summary(paired)
    assert "1 in one of the two" in text and "math_length: drift control" in text
    assert "| met in one of two |" in criteria.paired_markdown(paired).replace("  ", "")


def test_draws_with_other_readings_cannot_be_paired():
    study = _read()
    with pytest.raises(ValueError, match="only in one"):
        criteria.compare_draws(study, study.assign(reading=study["reading"] + " (other)"))
    with pytest.raises(ValueError, match="repeats readings"):
        criteria.compare_draws(pd.concat([study, study.iloc[:1]]), study)


def test_the_script_writes_the_tables_from_a_draws_files(tmp_path):
    tables, figures = tmp_path / "tables", tmp_path / "figures"
    tables.mkdir()
    figures.mkdir()
    _regime().to_csv(tables / "regime.csv", index=False)
    _crossings(1).to_csv(tables / "first_crossing.csv", index=False)
    _stable(3).to_csv(figures / "fig5.csv", index=False)
    script = load_script("analysis/criteria.py")
    arguments = ["--scale", "tiny", "--regime", str(tables / "regime.csv"), "--first-crossing",
                 str(tables / "first_crossing.csv"), "--stable", str(figures / "fig5.csv"), "--out-dir", str(tmp_path)]
    script.main(arguments)
    written = pd.read_csv(tables / "criteria.csv")
    measured = written[written["criterion"] == "5 measurable"]
    assert measured["value"].item() == 0.25 and not measured["met"].item()
    page = (tables / "criteria.md").read_text()
    assert page.startswith("# The calibration's regime criteria on this draw (tiny scale)")
    assert "not met: 5 measurable on toolcall" in page
    (tables / "regime.csv").unlink()
    with pytest.raises(SystemExit, match="regime.csv"):
        script.main(arguments)


def test_the_studys_config_states_the_criteria_and_refuses_a_malformed_bound(tmp_path):
    config = load_analysis_config(ROOT / "analysis" / "config.yaml", "tiny")
    assert config["regime_criteria"]["no_drift"]["points"] == [-5, 5]
    assert config["regime_criteria"]["headroom"]["methods"] == ["grpo", "gdpo", "dara_sym", "dara_asym"]
    text = yaml.safe_load((ROOT / "analysis" / "config.yaml").read_text())
    text["regime_criteria"]["no_drift"]["points"] = [5]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(text))
    (tmp_path / "config.schema.yaml").write_text((ROOT / "analysis" / "config.schema.yaml").read_text())
    with pytest.raises(ValueError, match="regime_criteria/no_drift/points"):
        load_analysis_config(tmp_path / "config.yaml", "tiny")


def test_every_task_with_a_heldout_metric_gets_a_drift_reading_and_unread_ones_pair_after_a_csv_round_trip(tmp_path):
    regime = _regime()
    control = (regime["table"] == "heldout") & (regime["method"] == "shuffled") & (regime["task"] == "toolcall")
    regime = regime[~control]
    config = {**CONFIG, "heldout_correctness": {**CONFIG["heldout_correctness"], "act_critic": "accuracy"}}
    table = criteria.read_criteria(regime, _crossings(3), _stable(3), config)
    drift = table[table["criterion"] == "3 no drift"].set_index("task")
    assert list(drift.index) == ["toolcall", "math_length", "act_critic"]
    assert drift.loc["toolcall", "read_on"] == "not read: no drift control evaluated on toolcall"
    assert drift.loc["act_critic", "met"] is None and drift.loc["math_length", "met"]
    # written and read back as make replicate reads them: NaN values, empty cells and None all pair up
    table.loc[len(table)] = {**table.iloc[0].to_dict(), "task": "", "reading": "a reading of no task",
                             "value": np.nan, "met": None}
    table.to_csv(tmp_path / "criteria.csv", index=False)
    again = pd.read_csv(tmp_path / "criteria.csv")
    paired = criteria.compare_draws(again, again)
    assert len(paired) == len(table) and set(paired.loc[paired["task"] == "", "agreement"]) == {
        criteria.UNREAD_IN_BOTH}
    assert (paired.loc[paired["met_study"].notna(), "agreement"] != criteria.ONE_OF_TWO).all()


def test_a_task_with_several_warm_starts_reads_every_criterion_on_them():
    quantities = {"toolcall": {"format density at step 0": (0.0, 0.05, 0.2), "DARA weight on format at step 0":
                               (1.0, 3.2, 4.0), "GDPO energy share of format at step 0": (0.0, 0.04, 0.2),
                               "correctness density at step 0": (0.5, 0.7, 0.9),
                               "base acc_tool (%)": (15.0, 20.0, 45.0),
                               "GDPO final minus base (points, median)": (5.0, 12.0, 30.0),
                               "DARA-Sym final minus base (points, median)": (30.0, 31.0, 32.0)},
                  "math_length": {"base accuracy (%)": (60.0, 65.0, 75.0),
                                  "correctness density at step 0": (1.0, 1.0, 0.9),
                                  "GDPO final minus base (points, median)": (-7.0, 30.0, 31.0),
                                  "DARA-Sym final minus base (points, median)": (-6.0, -6.5, 20.0)}}
    per_warm_start = pd.DataFrame([{"table": "warm_starts", "task": task, "warm_start": w, "quantity": q, "value": v}
                                   for task, rows in quantities.items() for q, values in rows.items()
                                   for w, v in enumerate(values)])
    table = _read(pd.concat([_regime(), per_warm_start], ignore_index=True)).set_index(["task", "reading"])
    on_warm_starts = table[table["read_on"] == criteria.MEDIAN_OVER_WARM_STARTS]
    assert len(on_warm_starts) == 10  # every reading these tasks have per warm start (their controls have none)
    assert table.loc[("toolcall", "DARA's weight on format at step 0"), "value"] == 3.2
    assert table.loc[("toolcall", "GDPO's final minus base (points)"), "value"] == 12.0
    lowest = table.loc[("math_length", "final minus base held-out accuracy (points), lowest method")]
    # DARA-Sym's median over warm starts (-6) is the lowest, not its pooled median_minus_base (31)
    assert lowest["value"] == -6.0 and lowest["extreme_method"] == "DARA-Sym" and not lowest["met"]
