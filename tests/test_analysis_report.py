"""Claims, comparisons, palette and atomic writes on small hand-made frames."""

import numpy as np
import pandas as pd
import pytest

from dara.analysis import claims, palette
from dara.analysis.figures import save_figure
from dara.analysis.paper_comparison import crossing_comparison, table_comparison
from dara.analysis.paper_reference import PaperReference, PaperStatement
from dara.analysis.tables import crossing_summary, final_checkpoint, main_group_size
from dara.io import write_text_atomic

NO_PAPER = PaperStatement("", "")  # claims whose paper side a test does not look at


def _records(steps_by_method, last_step=100):
    rows = [{"task": "toolcall", "method": method, "G": 8, "seed": seed, "reward": "format", "threshold": 0.8,
             "step": np.nan if step is None else step, "last_step": last_step}
            for method, steps in steps_by_method.items() for seed, step in enumerate(steps)]
    return pd.DataFrame(rows).astype({"step": "Float64"})


def test_faster_crossing_counts_never_crossing_seeds_as_censored():
    # GDPO's crossed seeds alone have median 11.5, faster than DARA's 15; with its three never-crossing seeds
    # censored at step 100, Kaplan-Meier S stays at 3/5 > 1/2, so its median is "never" and DARA is faster.
    records = _records({"dara_sym": [14, 15, 16], "gdpo": [11, 12, None, None, None]})
    claim = claims.faster_crossing(records, "dara_sym", "gdpo", paper=NO_PAPER, scale="tiny", what="format 0.8")
    # faster by Kaplan-Meier median, but three against five seeds is no evidence (log-rank p = 0.33)
    assert claim.verdict == "same direction, not significant"
    assert "median step 15 vs never" in claim.ours and "crossed 3/3 vs 2/5" in claim.ours


def test_a_faster_crossing_is_supported_only_when_the_log_rank_test_is_significant():
    many = _records({"dara_sym": [5, 6, 7, 8, 9, 10], "gdpo": [30, 31, 32, None, None, None]})
    claim = claims.faster_crossing(many, "dara_sym", "gdpo", paper=NO_PAPER, scale="tiny", what="x")
    assert claim.verdict == "supported" and claim.logrank_p == pytest.approx(0.000506, abs=5e-7)
    # the effect size beside it: GDPO's never-crossing seeds enter at last step + 1 = 101, so its median is
    # (32 + 101) / 2 = 66.5 against DARA-Sym's 7.5
    assert claim.median_difference == 7.5 - 66.5 and claim.ci_low <= claim.median_difference <= claim.ci_high
    assert claim.ci_high < 0  # every resample of these seeds has DARA-Sym ahead
    never = claims.faster_crossing(_records({"dara_sym": [None, None], "gdpo": [3, 4]}), "dara_sym", "gdpo",
                                   paper=NO_PAPER, scale="tiny", what="x")
    assert never.verdict == "not supported"


def test_faster_crossing_verdicts():
    slower = claims.faster_crossing(_records({"dara_sym": [30, 31, 32], "gdpo": [10, 11, 12]}), "dara_sym", "gdpo",
                                    paper=NO_PAPER, scale="tiny", what="x")
    assert slower.verdict == "not supported"
    neither = claims.faster_crossing(_records({"dara_sym": [None], "gdpo": [None]}), "dara_sym", "gdpo",
                                     paper=NO_PAPER, scale="tiny", what="x")
    assert neither.verdict == "inconclusive"
    missing = claims.faster_crossing(_records({"dara_sym": [3]}), "dara_sym", "gdpo", paper=NO_PAPER, scale="tiny", what="x")
    assert missing.verdict == "not testable" and "gdpo" in missing.ours


def test_sparse_upweighted_reads_each_runs_first_rollout_batch():
    # the tiny trainer logs the warm start's batch as step 0, verl as step 1: the first row either way
    tiny = pd.DataFrame({"method": ["dara_sym"] * 2, "G": [8, 8], "seed": [0, 0], "step": [0, 1],
                         "density/format": [0.1, 0.9], "density/correctness": [0.8, 0.9],
                         "weight/format": [2.8, 1.0]})
    claim = claims.sparse_upweighted(tiny, "format", "correctness", ["dara_sym"], paper=NO_PAPER, scale="t", task="toolcall")
    assert claim.verdict == "supported" and "first batch (step 0)" in claim.ours
    verl = tiny.assign(step=[1, 2])
    claim = claims.sparse_upweighted(verl, "format", "correctness", ["dara_sym"], paper=NO_PAPER, scale="t", task="toolcall")
    assert claim.verdict == "supported" and "first batch (step 1)" in claim.ours
    later_sparse = tiny.assign(**{"density/format": [0.9, 0.1], "weight/format": [1.0, 2.8]})
    claim = claims.sparse_upweighted(later_sparse, "format", "correctness", ["dara_sym"], paper=NO_PAPER, scale="t",
                                     task="toolcall")
    assert claim.verdict == "not supported"


def test_crossing_comparison_against_the_paper_medians():
    paper = pd.read_csv("analysis/reference/format_crossing_steps.csv", dtype={"step": "Float64"})
    ours = _records({"grpo": [40, 41, 42], "gdpo": [20, None, 22], "dara_asym": [10, 11, 12]})
    table = crossing_comparison(ours, paper).set_index("method")
    assert table.loc["grpo", "paper_median"] == 34 and table.loc["gdpo", "paper_median"] == 19
    assert table.loc["dara_asym", "paper_median"] == 14 and table.loc["dara_sym", "paper_median"] == 15
    assert table.loc["gdpo", "ours_median"] == 22  # the never-crossing seed counts as latest
    assert table.loc["dara_asym", "difference"] == 11 - 14
    assert table.loc["dvao", "ours_steps"] == "no runs" and np.isnan(table.loc["dvao", "paper_median"])


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


def test_crossing_summary_median_is_never_when_half_never_cross():
    summary = crossing_summary(_records({"gdpo": [10, None, None], "grpo": [10, 20, None]})).set_index("method")
    assert np.isnan(summary.loc["gdpo", "median"]) and summary.loc["gdpo", "n_crossed"] == 1
    assert summary.loc["grpo", "median"] == 20 and summary.loc["grpo", "max"] == 20
    assert summary.loc["grpo", "steps"] == "10 20 never"


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
    crossings = pd.DataFrame({"method": ["dara_sym"] * 3 + ["gdpo"] * 3, "step": [10, 12, 14, 20, np.nan, np.nan]})
    mark_crossings(ax, crossings, lambda method, step: 0.5, lambda method: 30.0)
    gdpo_marker, dara_marker = ax.lines  # drawn in the palette order: baselines first
    assert dara_marker.get_xdata().tolist() == [12.0] and dara_marker.get_markerfacecolor() != "none"
    assert gdpo_marker.get_xdata().tolist() == [30.0] and gdpo_marker.get_markerfacecolor() == "none"
    plt.close(figure)


def test_crossing_records_do_not_count_the_step0_policy():
    from dara.analysis.tables import crossing_records

    metrics = pd.DataFrame({"task": "t", "method": "gdpo", "G": 8, "seed": 0, "step": [0, 1, 2, 3],
                            "reward/format": [0.9, 0.1, 0.85, 0.9]})
    records = crossing_records(metrics, {"format": [0.8]})
    assert records[["step", "last_step"]].values.tolist() == [[2, 3]]
