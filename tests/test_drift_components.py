"""experiments/calibration/drift_components.py on constructed evaluation trees: each run's final minus base, the
spread within and between warm starts, criterion 3's reading and how often its resamples fall inside the bound."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from script_loader import load_script

drift_components = load_script("experiments/calibration/drift_components.py")


def _tree(root, method: str, changes: dict[int, list[float]], *, base: float = 0.5, last_step: int = 80,
          policies: str = "policy") -> None:
    """Evaluations of ``method`` on math_length: warm start w's seeds s = w + 5 i with the given changes (points) at
    the last step, 12.3 at step 10; warm start w's policy is ``policies`` + w (its step-0 checkpoint's hash)."""
    for warm_start, values in changes.items():
        for index, change in enumerate(values):
            seed = warm_start + 5 * index
            folder = root / "eval" / "math_length" / method / "G8" / f"seed{seed}"
            folder.mkdir(parents=True)
            for step, accuracy in ((0, base), (10, base + 0.123), (last_step, base + change / 100)):
                (folder / f"step{step}.json").write_text(json.dumps(
                    {"task": "math_length", "method": method, "group_size": 8, "seed": seed, "warm_start": warm_start,
                     "step": step, "metrics": {"accuracy": accuracy}, "checkpoint_sha256": f"{policies}{warm_start}"}))


def test_each_run_is_read_at_its_last_step_against_its_base(tmp_path):
    _tree(tmp_path, "shuffled", {0: [-6.0, 2.0], 1: [4.0]})
    runs = drift_components.final_changes(drift_components.step_changes(
        tmp_path, "math_length", "shuffled", "metrics/accuracy")).sort_values("seed")
    assert runs["seed"].tolist() == [0, 1, 5] and runs["warm_start"].tolist() == [0, 1, 0]
    assert runs["step"].tolist() == [80, 80, 80]
    np.testing.assert_allclose(runs["change"], [-6.0, 4.0, 2.0])


def test_a_run_without_its_base_or_metric_is_refused_naming_it(tmp_path):
    _tree(tmp_path, "shuffled", {0: [1.0]})
    (tmp_path / "eval/math_length/shuffled/G8/seed0/step0.json").unlink()
    with pytest.raises(ValueError, match=r"without both a step-0 and a later evaluation.*'shuffled', 8, 0\)"):
        drift_components.step_changes(tmp_path, "math_length", "shuffled", "metrics/accuracy")
    with pytest.raises(ValueError, match="no evaluated gdpo runs"):
        drift_components.step_changes(tmp_path, "math_length", "gdpo", "metrics/accuracy")
    with pytest.raises(ValueError, match="no 'metrics/correct'"):
        drift_components.step_changes(tmp_path, "math_length", "shuffled", "metrics/correct")


def test_the_reading_is_the_median_of_the_warm_starts_medians_not_of_the_pooled_runs():
    groups = [np.array([-10.0, -8.0, 30.0]), np.array([1.0]), np.array([2.0, 3.0])]
    # per warm start: -8, 1, 2.5 -> 1; the pooled median (2.0) would differ
    assert drift_components.reading(groups) == 1.0
    assert np.median(np.concatenate(groups)) != 1.0


def test_a_resample_draws_whole_warm_starts_with_their_seeds():
    groups = [np.array([-10.0, 10.0]), np.array([2.0, 4.0])]  # medians 0 and 3
    readings = drift_components.resampled_readings(groups, resamples=500, seed=0)
    # a median over two drawn warm starts: 0, 1.5 or 3; never a value that redrawing seeds would make (-10, 10, ...)
    assert set(np.unique(readings)) == {0.0, 1.5, 3.0}


def test_components_split_the_spread_and_resample_the_reading():
    runs = pd.DataFrame({"warm_start": [0, 0, 1, 1, 2, 2], "change": [-2.0, 2.0, 9.0, 13.0, -1.0, 3.0]})
    result = drift_components.components(runs, (-5, 5), resamples=2000, seed=0)
    assert result["runs"] == 6 and result["warm_starts"] == 3 and result["mean"] == pytest.approx(4.0)
    # each warm start's seeds differ by 4: sample SD 2.83; medians 0, 11, 1
    assert result["sd_within_warm_start"] == pytest.approx(np.sqrt(8))
    assert result["sd_of_warm_start_medians"] == pytest.approx(np.std([0, 11, 1], ddof=1))
    # two seeds a warm start: the medians' variance less half the seeds' variance
    assert result["sd_between_warm_starts"] == pytest.approx(np.sqrt(np.var([0, 11, 1], ddof=1) - 8 / 2))
    assert result["reading"] == 1.0
    assert 0 < result["share_within_bound"] < 1 and result["reading_sd"] > 0
    assert result["reading_p05"] < result["reading"] < result["reading_p95"]


def test_a_draw_without_spread_is_read_exactly_and_inside_or_outside_the_bound_every_time():
    still = pd.DataFrame({"warm_start": [0, 0, 1, 1], "change": [3.0, 3.0, 3.0, 3.0]})
    inside = drift_components.components(still, (-5, 5), resamples=200, seed=0)
    assert inside["reading_sd"] == 0 and inside["share_within_bound"] == 1.0
    assert inside["sd_between_warm_starts"] == 0.0
    outside = drift_components.components(still.assign(change=-7.0), (-5, 5), resamples=200, seed=0)
    assert outside["share_within_bound"] == 0.0


def test_the_page_and_tables_are_written_for_every_draw_and_method(tmp_path, monkeypatch):
    draw = tmp_path / "draw"
    _tree(draw, "shuffled", {0: [-6.0, 2.0], 1: [4.0, -1.0]})
    _tree(draw, "gdpo", {0: [30.0, 31.0], 1: [33.0, 32.0]})
    out = tmp_path / "out"
    drift_components.main(["--task", "math_length", "--draw", f"a draw=v1={draw}", "--resamples", "100",
                           "--out", str(out)])
    table = pd.read_csv(out / "drift_components.csv")
    assert table["draw"].tolist() == ["a draw=v1", "a draw=v1"]  # the label may hold "="; the tree follows the last
    assert table["method"].tolist() == ["shuffled", "gdpo"]
    assert len(pd.read_csv(out / "runs.csv")) == 8
    page = (out / "drift_components.md").read_text()
    components_section, by_step_section = page.split("## The drift by step")
    control, contrast = (line for line in components_section.splitlines() if line.startswith("| a draw=v1 |"))
    assert control.endswith(" % |") and contrast.endswith("| - |")
    assert "bound [-5, 5]" in page
    # the by-step section: a row per draw and method, one pooled over draws for the control, and the rule's verdict
    rows = [line for line in by_step_section.splitlines() if line.startswith("| a draw=v1 |")]
    assert len(rows) == 2 and "| every draw pooled | shuffled |" in by_step_section
    assert "Verdict (shuffled, every draw pooled): no verdict" in by_step_section  # last step's mean -0.25
    assert len(pd.read_csv(out / "drift_by_step.csv")) == 4  # 2 methods x steps 10 and 80
    command = (out / "command.txt").read_text()
    assert command.startswith("python experiments/calibration/drift_components.py --task math_length")


def test_a_draw_without_a_tree_is_refused(capsys):
    with pytest.raises(SystemExit):
        drift_components.main(["--task", "math_length", "--draw", "no tree", "--out", "unused"])
    assert "LABEL=RESULTS_TREE" in capsys.readouterr().err


def test_every_evaluated_step_is_read_against_the_base_and_the_last_marked(tmp_path):
    _tree(tmp_path, "shuffled", {0: [-6.0, 2.0], 1: [4.0]})
    changes = drift_components.step_changes(tmp_path, "math_length", "shuffled", "metrics/accuracy")
    assert changes["step"].tolist() == [10, 80, 10, 80, 10, 80]  # seeds 0, 1, 5
    assert changes["last"].tolist() == [False, True] * 3
    np.testing.assert_allclose(changes["change"], [12.3, -6.0, 12.3, 4.0, 12.3, 2.0])
    assert changes["base_policy"].tolist() == ["policy0"] * 2 + ["policy1"] * 2 + ["policy0"] * 2


def test_the_drift_by_step_takes_the_warm_start_as_its_unit():
    changes = pd.DataFrame({"warm_start": [0, 0, 1], "step": [80, 80, 80], "change": [-10.0, 0.0, 4.0]})
    by_step = drift_components.drift_by_step(changes)
    assert by_step["runs"].tolist() == [3] and by_step["warm_starts"].tolist() == [2]
    # warm-start means -5 and 4: their mean -0.5 (over the three runs it would be -2.0), their SD 6.36 over sqrt(2)
    assert by_step["mean"].tolist() == [pytest.approx(-0.5)]
    assert by_step["se_over_warm_starts"].tolist() == [pytest.approx(np.std([-5.0, 4.0], ddof=1) / np.sqrt(2))]


@pytest.mark.parametrize("middle, verdict", [(-2.0, "grows with the updates"), (-7.0, "comes early"),
                                             (-6.0, "undecided"), (-5.0, "grows with the updates")])
def test_the_step_rule_compares_the_middle_with_the_last(middle, verdict):
    by_step = pd.DataFrame({"step": [20, 40, 60, 80], "mean": [-1.0, middle, -6.0, -10.0],
                            "se_over_warm_starts": [1.0, 1.0, 1.0, 2.0]})
    assert drift_components.step_verdict(by_step).startswith(verdict)
    # where the last step is within two standard errors of 0, no verdict, whatever the middle
    assert drift_components.step_verdict(by_step.assign(se_over_warm_starts=5.0)).startswith("no verdict")


def test_draws_that_share_a_warm_start_pool_it_as_one_unit(tmp_path):
    """Pooled, a warm start is its policy, not its number: draw one's warm starts 0 and 1 are draw two's 2 and 3
    (the same policies, as a replicate's renumbered copies would be), and draw three's 0 is another policy. Three
    units, each one value however many runs it has."""
    _tree(tmp_path / "one", "shuffled", {0: [-6.0, -4.0], 1: [-10.0, -8.0]}, policies="shared")
    _tree(tmp_path / "two", "shuffled", {0: [-6.0, -4.0], 1: [-10.0, -8.0]}, policies="shared")
    for path in (tmp_path / "two" / "eval" / "math_length" / "shuffled").glob("G8/seed*/step*.json"):
        record = json.loads(path.read_text())  # draw one's policies under other warm-start numbers
        path.write_text(json.dumps({**record, "warm_start": record["warm_start"] + 2}))
    _tree(tmp_path / "three", "shuffled", {0: [2.0]}, policies="other")
    for name in ("one", "two", "three"):
        _tree(tmp_path / name, "gdpo", {0: [30.0]})
    drift_components.main(["--task", "math_length", *[f"--draw={name}={tmp_path / name}" for name in
                                                      ("one", "two", "three")],
                           "--resamples", "10", "--out", str(tmp_path / "out")])
    pooled = [line for line in (tmp_path / "out" / "drift_components.md").read_text().splitlines()
              if line.startswith("| every draw pooled |")]
    # step 80: shared0 -5 (four runs), shared1 -9 (four runs), other0 +2 (one run): mean -4.0, SD 5.57, SE 3.2.
    # By warm-start number it would be four units (0, 1, 2, 3, with three's 0 joining one's 0); by run, -6.0.
    assert pooled and pooled[0].endswith(f"| -4.0 ± {np.std([-5.0, -9.0, 2.0], ddof=1) / np.sqrt(3):.1f} |")
