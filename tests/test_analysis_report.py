"""Claims, comparisons, palette and atomic writes on small hand-made frames."""

import numpy as np
import pandas as pd
import pytest

from dara.analysis import claims, palette
from dara.analysis.crossing import crossing_summary
from dara.analysis.figures import save_figure
from dara.analysis.paper_comparison import crossing_comparison, table_comparison
from dara.analysis.paper_reference import PaperReference, PaperStatement
from dara.analysis.tables import final_checkpoint, main_group_size
from dara.io import write_text_atomic

NO_PAPER = PaperStatement("", "")  # claims whose paper side a test does not look at


def _records(steps_by_method, last_step=100, warm_starts=None):
    """Crossing records; ``warm_starts``: per method, each seed's warm start (None: no warm_start column)."""
    rows = [{"task": "toolcall", "method": method, "G": 8, "seed": seed, "reward": "format", "threshold": 0.8,
             "step": np.nan if step is None else step, "last_step": last_step,
             **({} if warm_starts is None else {"warm_start": warm_starts[method][seed]})}
            for method, steps in steps_by_method.items() for seed, step in enumerate(steps)]
    return pd.DataFrame(rows).astype({"step": "Float64"})


def _faster(records, method="dara_sym", baseline="gdpo"):
    return claims.faster_crossing(records, method, baseline, paper=NO_PAPER, scale="tiny", what="x")


def test_faster_crossing_counts_never_crossing_seeds_as_censored():
    # GDPO's crossed seeds alone have median 11.5, faster than DARA's 15; with its three never-crossing seeds
    # censored at step 100, Kaplan-Meier S stays at 3/5 > 1/2, so its median is "never"
    records = _records({"dara_sym": [14, 15, 16], "gdpo": [11, 12, None, None, None]})
    claim = _faster(records)
    # three against five seeds is no evidence (log-rank p = 0.33)
    assert claim.verdict == "not significant" and claim.p_raw == pytest.approx(0.33, abs=0.01)
    assert "KM median step 15 vs never" in claim.ours and "crossed 3/3 vs 2/5" in claim.ours
    assert "1 warm start shared" in claim.ours and claim.warm_starts == 1  # no warm_start column: one warm start


def test_a_faster_crossing_is_supported_only_when_the_log_rank_test_is_significant():
    many = _records({"dara_sym": [5, 6, 7, 8, 9, 10], "gdpo": [30, 31, 32, None, None, None]})
    claim = _faster(many)
    # one warm start: the stratified test is the plain log-rank test (hand-checked in test_analysis_survival.py)
    assert claim.verdict == "supported" and claim.p_raw == pytest.approx(0.000506, abs=5e-7)
    assert claim.p_holm == claim.p_raw and claim.direction == 1  # checked alone: a family of one
    # the effect size beside it: GDPO's never-crossing seeds enter at last step + 1 = 101; of six seeds each the
    # median is the lower middle value (the Kaplan-Meier median in the claim's text): 32 against DARA-Sym's 7
    assert "KM median step 7 vs 32" in claim.ours
    assert claim.median_difference == 7 - 32 and claim.ci_low <= claim.median_difference <= claim.ci_high
    assert claim.ci_high < 0  # every resample of these seeds has DARA-Sym ahead
    assert claim.per_warm_start == "ws0 -25"  # one warm start: the pooled difference


def test_a_significantly_slower_crossing_is_refuted():
    slower = _faster(_records({"dara_sym": [30, 31, 32, 33, 34], "gdpo": [10, 11, 12, 13, 14]}))
    assert slower.verdict == "refuted" and slower.direction == -1 and slower.p_raw < 0.05
    assert "O-E -" in slower.ours and slower.median_difference == 20
    # slower, but two against two seeds: not significant, not refuted
    never = _faster(_records({"dara_sym": [None, None], "gdpo": [3, 4]}))
    assert never.verdict == "not significant" and never.direction == -1


def test_faster_crossing_untested_verdicts():
    neither = _faster(_records({"dara_sym": [None], "gdpo": [None]}))
    assert neither.verdict == "inconclusive" and "neither arm crossed" in neither.ours and np.isnan(neither.p_raw)
    missing = _faster(_records({"dara_sym": [3]}))
    assert missing.verdict == "not testable" and "gdpo" in missing.ours


def test_the_crossing_test_is_stratified_by_warm_start():
    from statsmodels.duration.survfunc import survdiff

    # warm start 1 is much slower than warm start 0 for both methods; within each, DARA-Sym leads by 4 to 6 steps
    steps = {"dara_sym": [10, 11, 12, 30, 31, 32], "gdpo": [15, 16, 17, 36, 37, 38]}
    warm_starts = {"dara_sym": [0, 0, 0, 1, 1, 1], "gdpo": [0, 0, 0, 1, 1, 1]}
    claim = _faster(_records(steps, warm_starts=warm_starts))
    durations = np.array(steps["dara_sym"] + steps["gdpo"], float)
    expected = survdiff(durations, np.ones(12, int), np.repeat([1, 0], 6), strata=np.tile([0, 0, 0, 1, 1, 1], 2))
    assert claim.p_raw == pytest.approx(expected[1])
    assert claim.direction == 1 and claim.verdict == "supported" and "O-E +" in claim.ours
    assert claim.per_warm_start == "ws0 -5, ws1 -6" and claim.warm_starts == 2
    assert "2 warm starts shared" in claim.ours


def test_a_warm_start_only_one_arm_has_is_left_out_and_named():
    steps = {"dara_sym": [10, 11, 30, 31, 5], "gdpo": [14, 15, 36, 37]}
    warm_starts = {"dara_sym": [0, 0, 1, 1, 2], "gdpo": [0, 0, 1, 1]}
    claim = _faster(_records(steps, warm_starts=warm_starts))
    assert claim.warm_starts == 2 and "ws2 with one arm only, left out of the test and the difference" in claim.ours
    assert claim.per_warm_start == "ws0 -4, ws1 -6"
    assert claim.median_difference == 11 - 15  # lower medians of [10, 11, 30, 31] and [14, 15, 36, 37]; ws2's 5 left out
    assert "n=5 vs 4" in claim.ours  # the Kaplan-Meier medians keep every run


def test_arms_that_share_no_warm_start_are_not_testable():
    records = _records({"dara_sym": [3, 4], "gdpo": [10, 12]}, warm_starts={"dara_sym": [0, 0], "gdpo": [1, 1]})
    claim = _faster(records)
    assert claim.verdict == "not testable" and "no warm start both arms trained from" in claim.ours
    assert np.isnan(claim.p_raw)


def test_holm_adjusts_the_family_and_decides_from_the_adjusted_p():
    from statsmodels.stats.multitest import multipletests

    def tested(p_value, direction=1):
        return claims.Claim("c", "", "", "", claims.tested_verdict(p_value, direction), "t", p_raw=p_value,
                            p_holm=p_value, direction=direction)

    untested = claims.Claim("u", "", "", "", "inconclusive", "t")
    family = [tested(0.01), tested(0.03), untested, tested(0.004, direction=-1), tested(0.5)]
    assert [c.verdict for c in family[:2]] == ["supported", "supported"]  # each alone is significant
    adjusted = claims.holm(family)
    expected = multipletests([0.01, 0.03, 0.004, 0.5], method="holm")[1]
    assert [c.p_holm for c in adjusted if np.isfinite(c.p_raw)] == pytest.approx(list(expected))
    assert [c.p_raw for c in adjusted] == pytest.approx([0.01, 0.03, np.nan, 0.004, 0.5], nan_ok=True)
    # 0.03 is significant raw, not after Holm (0.03 x 2 = 0.06); 0.01 x 3 = 0.03 stays; the slower one is refuted
    assert [c.verdict for c in adjusted] == ["supported", "not significant", "inconclusive", "refuted",
                                             "not significant"]
    assert adjusted[2] == untested and claims.holm([untested]) == [untested]


def test_the_claims_table_shows_raw_and_holm_p_side_by_side():
    claim = claims.Claim("c", "paper", "ref.csv", "ours", "not significant", "t", p_raw=0.03, p_holm=0.06,
                         direction=1, per_warm_start="ws0 -4, ws1 -6", warm_starts=2)
    table = claims.claims_markdown([claim])
    header = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    assert header == ["claim", "paper", "ours", "per warm start", "p (raw)", "p (Holm)", "verdict", "scale"]
    row = [cell.strip() for cell in table.splitlines()[2].strip("|").split("|")]
    assert row[3:7] == ["ws0 -4, ws1 -6", "0.03", "0.06", "not significant"]
    frame = claims.claims_frame([claim])
    assert {"p_raw", "p_holm", "ci_low", "ci_high", "bound", "per_warm_start", "warm_starts", "verdict"} <= set(frame)


def test_sparse_upweighted_is_a_regime_check_read_from_each_runs_first_rollout_batch():
    # the tiny trainer logs the warm start's batch as step 0, verl as step 1: the first row either way
    tiny = pd.DataFrame({"task": "toolcall", "method": ["dara_sym"] * 2, "G": [8, 8], "seed": [0, 0], "step": [0, 1],
                         "density/format": [0.1, 0.9], "density/correctness": [0.8, 0.9],
                         "weight/format": [2.8, 1.0]})
    check = claims.sparse_upweighted(tiny, "format", "correctness", ["dara_sym"], paper=NO_PAPER, task="toolcall")
    assert check.holds is True and "First batch (step 0)" in check.observed and "**holds**" in check.line()
    verl = tiny.assign(step=[1, 2])
    check = claims.sparse_upweighted(verl, "format", "correctness", ["dara_sym"], paper=NO_PAPER, task="toolcall")
    assert check.holds is True and "First batch (step 1)" in check.observed
    later_sparse = tiny.assign(**{"density/format": [0.9, 0.1], "weight/format": [1.0, 2.8]})
    check = claims.sparse_upweighted(later_sparse, "format", "correctness", ["dara_sym"], paper=NO_PAPER,
                                     task="toolcall")
    assert check.holds is False and "**does not hold**" in check.line()
    check = claims.sparse_upweighted(tiny.drop(columns="weight/format"), "format", "correctness", ["dara_sym"],
                                     paper=NO_PAPER, task="toolcall")
    assert check.holds is None


def test_crossing_comparison_against_the_paper_medians():
    paper = PaperReference("analysis/reference").crossing_steps()
    ours = _records({"grpo": [40, 41, 42], "gdpo": [20, None, 22], "dara_asym": [10, 11, 12], "dara_sym": [9, 12]})
    table = crossing_comparison(ours, paper).set_index("method")
    assert table.loc["grpo", "paper_km_median"] == 34 and table.loc["gdpo", "paper_km_median"] == 19
    assert table.loc["dara_asym", "paper_km_median"] == 14 and table.loc["dara_sym", "paper_km_median"] == 15
    assert table.loc["gdpo", "ours_km_median"] == 22  # the never-crossing seed is censored after every crossing
    # two seeds: Kaplan-Meier's median is where half have crossed, 9, not numpy's 10.5 between them
    assert table.loc["dara_sym", "ours_km_median"] == 9
    assert table.loc["dara_asym", "difference"] == 11 - 14
    # the paper's DVAO: 60, never, never within its 100 steps
    assert table.loc["dvao", "paper_steps"] == "60 never never" and np.isnan(table.loc["dvao", "paper_km_median"])
    assert table.loc["dvao", "ours_steps"] == "no runs" and np.isnan(table.loc["dvao", "ours_km_median"])


def test_reference_crossing_steps_reproduce_the_papers_medians():
    paper = pd.read_csv("analysis/reference/format_crossing_steps.csv")
    medians = paper.groupby(["model_size", "method"])["step"].median()
    assert medians["1.5B"][["grpo", "gdpo", "dara_sym", "dara_asym"]].tolist() == [34, 19, 15, 14]
    assert medians["3B"][["grpo", "gdpo", "dara_sym"]].tolist() == [19, 12, 10]


def test_table_comparison_keeps_unmatched_rows():
    ours = pd.DataFrame({"method": ["gdpo", "dara_sym"], "metric": ["f", "f"], "mean": [90.0, 95.0],
                         "sd": [1.0, 2.0], "n": [3, 3]})
    paper = pd.DataFrame({"method": ["gdpo", "grpo"], "metric": ["f", "f"], "mean": [97.0, 81.0], "sd": [1.0, 5.0]})
    merged = table_comparison(ours, paper).set_index("method")
    assert merged.index.tolist() == ["grpo", "gdpo", "dara_sym"]  # paper order
    assert merged.loc["gdpo", "difference"] == -7.0
    assert np.isnan(merged.loc["grpo", "ours"]) and np.isnan(merged.loc["dara_sym", "paper"])


def test_crossing_summary_median_is_never_when_fewer_than_half_cross():
    summary = crossing_summary(_records({"gdpo": [10, None, None], "grpo": [10, 20, None],
                                         "dara_sym": [10, None, 30, None]})).set_index("method")
    assert np.isnan(summary.loc["gdpo", "km_median"]) and summary.loc["gdpo", "n_crossed"] == 1
    assert summary.loc["grpo", "km_median"] == 20 and summary.loc["grpo", "max"] == 20
    assert summary.loc["grpo", "steps"] == "10 20 never"
    # exactly half crossed: Kaplan-Meier falls to 1/2 at the second crossing (numpy's median would say never)
    assert summary.loc["dara_sym", "km_median"] == 30 and np.isnan(summary.loc["dara_sym", "km_q75"])


def test_final_checkpoint_picks_last_or_named_step_and_names_missing_runs():
    evaluations = pd.DataFrame({"task": "t", "method": "m", "G": 8, "seed": [0, 0, 1], "step": [0, 30, 0], "x": [1, 2, 3]})
    assert final_checkpoint(evaluations)["step"].tolist() == [30, 0]
    with pytest.raises(ValueError, match="without an evaluation at step 30"):
        final_checkpoint(evaluations, step=30)


def test_main_group_size_prefers_most_runs():
    runs = pd.DataFrame({"task": "t", "method": ["a", "b", "c", "a"], "G": [8, 8, 8, 4], "seed": 0, "step": 1})
    assert main_group_size(runs) == 8
    # one entry per run, not per row: G = 4's one run logs three steps, G = 8's two runs one each
    runs = pd.DataFrame({"task": "t", "method": ["a", "a", "a", "b", "c"], "G": [4, 4, 4, 8, 8], "seed": 0,
                         "step": [0, 1, 2, 0, 0]})
    assert main_group_size(runs) == 8
    from dara.runs import most_common_group_size

    assert most_common_group_size([16, 8, 16, 8]) == 8 and most_common_group_size([4, 16, 16]) == 16
    with pytest.raises(ValueError, match="no runs"):
        most_common_group_size([])


def test_palette_is_fixed_and_rejects_unknown_methods():
    assert palette.ordered(["dara_asym", "grpo", "gdpo"]) == ["grpo", "gdpo", "dara_asym"]
    assert len(set(palette.METHOD_COLORS.values())) == len(palette.METHOD_COLORS)
    with pytest.raises(ValueError, match="unknown method 'dara'"):
        palette.color("dara")


def test_atomic_writes_leave_no_temporary_files(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    write_text_atomic(tmp_path / "a.md", "x")
    figure = plt.figure()
    written = save_figure(figure, tmp_path / "figures" / "fig.v1")
    assert [p.name for p in written] == ["fig.v1.png", "fig.v1.pdf"]
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["fig.v1.pdf", "fig.v1.png"]
    assert (tmp_path / "figures/fig.v1.png").read_bytes()[:4] == b"\x89PNG"

    class Broken:
        def savefig(self, *args, **kwargs):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_figure(Broken(), tmp_path / "figures" / "fig.v1")
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["fig.v1.pdf", "fig.v1.png"]


def test_crossing_markers_filled_at_median_open_when_never():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dara.analysis.figures import mark_crossings

    figure, ax = plt.subplots()
    crossings = pd.DataFrame({"method": ["dara_sym"] * 3 + ["gdpo"] * 3, "step": [10, 12, 14, 20, np.nan, np.nan],
                              "last_step": 30})
    mark_crossings(ax, crossings, lambda method, step: 0.5)
    gdpo_marker, dara_marker = ax.lines  # drawn in the palette order: baselines first
    assert dara_marker.get_xdata().tolist() == [12.0] and dara_marker.get_markerfacecolor() != "none"
    assert gdpo_marker.get_xdata().tolist() == [30.0] and gdpo_marker.get_markerfacecolor() == "none"
    plt.close(figure)


def test_crossing_records_do_not_count_the_step0_policy():
    from dara.analysis.crossing import crossing_records

    metrics = pd.DataFrame({"task": "t", "method": "gdpo", "G": 8, "seed": 0, "step": [0, 1, 2, 3],
                            "reward/format": [0.9, 0.1, 0.85, 0.9]})
    records = crossing_records(metrics, {"format": [0.8]})
    assert records[["step", "last_step"]].values.tolist() == [[2, 3]]
