"""The ledger of reproductions (dara.analysis.ledger, analysis/ledger.py): its schema, a draw's rows from a results
tree, what it refuses, the backfilled record of the four earlier draws, the view of claims across draws, and the
parsing of the old tables' "ours" texts."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dara.analysis import ledger
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "docs" / "results" / "ledger.csv"
SHA = "abcdef1234567890abcdef1234567890abcdef12"
PIN = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}
CPU = {"vendor": "AuthenticAMD", "model_name": "AMD EPYC", "family": "25", "model": "17", "logical_cpus": 2,
       "flags": {"avx2": True, "fma": True, "avx512f": True, "avx512_bf16": True, "amx_tile": False}}


# ---------------------------------------------------------------------------------------------------------------
# schema


def test_the_schema_names_every_column_in_order_with_its_type():
    assert list(ledger.SCHEMA) == [
        "draw_id", "training_revision", "analysis_revision", "date", "cpu_model", "vector_type", "kernel_dispatch",
        "seeds_method", "seeds_baseline", "warm_starts", "reproduce_seconds", "core_minutes", "claim", "claim_kind",
        "claim_rules", "task", "effect", "ci_low", "ci_high", "p_raw", "p_adjusted", "verdict", "runs_sha256",
        "same_runs_as"]
    strings = {"draw_id", "training_revision", "analysis_revision", "date", "cpu_model", "vector_type",
               "kernel_dispatch", "claim", "claim_kind", "claim_rules", "task", "verdict", "runs_sha256",
               "same_runs_as"}
    counts = {"seeds_method", "seeds_baseline", "warm_starts", "reproduce_seconds"}
    assert {c for c, t in ledger.SCHEMA.items() if t == "string"} == strings
    assert {c for c, t in ledger.SCHEMA.items() if t == "Int64"} == counts
    assert {c for c, t in ledger.SCHEMA.items() if t == "float64"} == set(ledger.SCHEMA) - strings - counts
    for column in ledger.SCHEMA:  # the module docstring documents each column
        assert f"``{column}``" in ledger.__doc__, column


def test_the_committed_ledger_reads_back_with_the_schema_types():
    table = ledger.read_ledger(LEDGER)
    assert list(table.columns) == list(ledger.SCHEMA)
    assert {column: str(dtype) for column, dtype in table.dtypes.items()} == ledger.SCHEMA


def test_a_ledger_written_before_the_task_and_repeat_columns_reads_with_them(tmp_path):
    table = ledger.read_ledger(LEDGER)
    old = tmp_path / "old.csv"
    table.drop(columns=list(ledger.ADDED_COLUMNS)).to_csv(old, index=False)
    upgraded = ledger.read_ledger(old)
    assert upgraded["task"].tolist() == table["claim"].map(ledger.task_from_text).tolist()
    assert upgraded["runs_sha256"].isna().all() and upgraded["same_runs_as"].isna().all()
    pd.testing.assert_frame_equal(upgraded.drop(columns=list(ledger.ADDED_COLUMNS)),
                                  table.drop(columns=list(ledger.ADDED_COLUMNS)))
    table.drop(columns=["task", "verdict"]).to_csv(old, index=False)  # any other set of columns is still refused
    with pytest.raises(ValueError, match=r"missing \['task', 'verdict'\]"):
        ledger.read_ledger(old)


def test_conform_refuses_a_missing_column_and_a_verdict_its_rules_do_not_have():
    row = ledger.read_ledger(LEDGER).iloc[[0]]
    with pytest.raises(ValueError, match=r"missing \['verdict'\]"):
        ledger.conform(row.drop(columns="verdict"))
    with pytest.raises(ValueError, match="verdicts not in the v1 rules"):
        ledger.conform(row.assign(verdict="refuted"))  # a v2 word in a v1 row
    with pytest.raises(ValueError, match="claim_rules must be one of"):
        ledger.conform(row.assign(claim_rules="v3"))


# ---------------------------------------------------------------------------------------------------------------
# a draw's rows from a results tree


def _claims_csv() -> pd.DataFrame:
    """tables/claims.csv as the v2 analysis writes it (dara.analysis.claims.claims_frame), three claims."""
    return pd.DataFrame([
        {"claim": "DARA-Sym reaches format 0.8 on toolcall (G=4) in fewer steps than GDPO", "paper": "",
         "reference": "",
         "ours": "KM median step 24 vs never (n=10 vs 10; crossed 8/10 vs 1/10; 5 warm starts shared; ...)",
         "verdict": "supported", "scale": "tiny", "median_difference": -6.0, "mean_difference": np.nan,
         "ci_low": -7.5, "ci_high": -3.0, "bound": np.nan, "p_raw": 0.0008, "p_holm": 0.008, "direction": 1,
         "fallback": "not significant", "per_warm_start": "", "warm_starts": 5, "n_method": 10, "n_baseline": 10},
        {"claim": "DARA-Sym's final held-out accuracy is not lower than GDPO's", "paper": "", "reference": "",
         "ours": "mean 48.74 vs 55.75 (base 19.25; margin 5; n=10 vs 10; 5 warm starts shared): ...",
         "verdict": "refuted", "scale": "tiny", "median_difference": np.nan, "mean_difference": -7.01,
         "ci_low": -9.5, "ci_high": -4.2, "bound": -8.9, "p_raw": 0.004, "p_holm": 0.03, "direction": -1,
         "fallback": "not significant", "per_warm_start": "", "warm_starts": 5, "n_method": 10, "n_baseline": 10},
        {"claim": "DARA-Asym reaches a stable 0.99 length reward on math_length (window 6, confirmed over 10 steps) "
                  "in fewer steps than GDPO", "paper": "", "reference": "",
         "ours": "KM median step never vs never (n=10 vs 10; crossed 0/10 vs 0/10; 5 warm starts shared): neither "
                 "arm crossed", "verdict": "inconclusive", "scale": "tiny", "median_difference": np.nan,
         "mean_difference": np.nan, "ci_low": np.nan, "ci_high": np.nan, "bound": np.nan, "p_raw": np.nan,
         "p_holm": np.nan, "direction": 0, "fallback": "not significant", "per_warm_start": "", "warm_starts": 5,
         "n_method": 0, "n_baseline": 0},
    ])


def _machine(cpu=CPU, pinned=True) -> dict:
    return {"dispatch": {"aten_cpu_capability": "AVX2", "mkl_cbwr_branch": "COMPATIBLE", "variables": PIN,
                         "marker": "1", "pinned": pinned, "torch_threads": 1, "torch": "2.13.0+cpu"},
            "cpu": cpu}


RUNS = ("toolcall/gdpo/G4/seed0", "toolcall/gdpo/G4/seed1", "toolcall/dara_sym/G4/seed0")


def finished_tree(root: Path, revisions=None, dirty=None, machines=None, started="yes") -> Path:
    """A results/tiny tree after `make reproduce` from empty: REPORT.md, tables/claims.csv, three runs with their
    git_revision.txt and machine.json, a warm start, benchmark files (two stages and the opt-in folder)."""
    results = root / "results" / "tiny"
    (results / "tables").mkdir(parents=True)
    (results / "REPORT.md").write_text("# DARA reproduction report (tiny scale)\n\nGenerated by "
                                       "`analysis/report_md.py` at code revision abcdef123456. At tiny scale ...\n")
    _claims_csv().to_csv(results / "tables" / "claims.csv", index=False)
    (results / "reproduce_seconds.txt").write_text(f"1500 seconds; started from an empty results/tiny: {started}\n")
    for index, run in enumerate(RUNS):
        folder = results / "runs" / run
        folder.mkdir(parents=True)
        revision = (revisions or {}).get(index, SHA)
        state = (dirty or {}).get(index, "false")
        (folder / "git_revision.txt").write_text(f"revision: {revision}\ndirty: {state}\n")
        (folder / "machine.json").write_text(json.dumps((machines or {}).get(index, _machine())))
        (folder / "metrics.parquet").write_bytes(b"")
        for step in (0, 30):  # the fingerprint reads the last one
            (folder / "checkpoints" / f"step{step}").mkdir(parents=True)
            (folder / "checkpoints" / f"step{step}" / "model.safetensors").write_bytes(f"{run} {step}".encode())
    warm_start = results / "policies" / "toolcall" / "warm_start0"
    warm_start.mkdir(parents=True)
    (warm_start / "warmstart.json").write_text(json.dumps({"step0": {}, "machine": _machine()}))
    for stage, seconds in (("train", [90.0, 600.0]), ("analysis", [60.0]), ("opt_in/train", [999.0])):
        (results / "benchmarks" / stage).mkdir(parents=True)
        pd.DataFrame({"s": seconds, "max_rss": 1.0}).to_csv(results / "benchmarks" / stage / "job.tsv", sep="\t",
                                                          index=False)
    return results


def test_a_draws_cost_is_read_from_the_copy_make_reproduce_left_not_from_later_jobs(tmp_path):
    results = finished_tree(tmp_path)
    shutil.copytree(results / "benchmarks", results / ledger.DRAW_BENCHMARKS)
    # an analysis redrawn later on the same runs rewrites the workflow's benchmark file
    pd.DataFrame({"s": [6000.0], "max_rss": 1.0}).to_csv(results / "benchmarks" / "analysis" / "job.tsv", sep="\t",
                                                        index=False)
    assert ledger.job_core_minutes(results) == 11.0  # the draw's 600 s + 60 s
    shutil.rmtree(results / ledger.DRAW_BENCHMARKS)  # a draw made before the copy: the workflow's folder
    assert ledger.job_core_minutes(results) == 110.0


def test_draw_rows_gives_one_row_per_claim_with_the_draws_code_machine_and_cost(tmp_path):
    rows = ledger.draw_rows(finished_tree(tmp_path), date="2026-12-06")
    assert list(rows.columns) == list(ledger.SCHEMA) and len(rows) == 3
    draw = rows.iloc[0]
    assert draw["draw_id"] == "abcdef1-avx512" and draw["training_revision"] == SHA
    assert draw["analysis_revision"] == "abcdef123456" and draw["date"] == "2026-12-06"
    assert draw["cpu_model"] == "AMD EPYC (family 25, model 17)" and draw["vector_type"] == "avx512"
    assert draw["kernel_dispatch"] == "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=AVX2"
    assert draw["reproduce_seconds"] == 1500
    assert draw["core_minutes"] == 11.0  # the last attempt of each job (600 s + 60 s), the opt-in job left out
    assert set(rows["claim_rules"]) == {"v2"} and set(rows["draw_id"]) == {"abcdef1-avx512"}
    assert rows["claim_kind"].tolist() == ["crossing", "non-inferiority", "crossing"]
    assert rows["effect"].tolist()[:2] == [-6.0, -7.01] and np.isnan(rows["effect"].iloc[2])
    assert rows["ci_low"].tolist()[:2] == [-7.5, -9.5] and rows["ci_high"].tolist()[:2] == [-3.0, -4.2]
    assert rows["p_raw"].tolist()[:2] == [0.0008, 0.004] and rows["p_adjusted"].tolist()[:2] == [0.008, 0.03]
    assert rows["verdict"].tolist() == ["supported", "refuted", "inconclusive"]
    # seeds per arm from the text's n=, also for the untested claim whose n_method is 0
    assert rows["seeds_method"].tolist() == [10, 10, 10] and rows["warm_starts"].tolist() == [5, 5, 5]


def test_an_unpinned_draw_on_an_avx2_cpu_is_labelled_so_and_its_id_can_be_given(tmp_path):
    avx2 = {**CPU, "model": "1", "flags": {**CPU["flags"], "avx512f": False, "avx512_bf16": False}}
    machines = {index: _machine(avx2, pinned=False) for index in range(len(RUNS))}
    results = finished_tree(tmp_path, machines=machines)
    for path in results.glob("policies/*/*/warmstart.json"):
        path.write_text(json.dumps({"machine": _machine(avx2, pinned=False)}))
    rows = ledger.draw_rows(results)
    assert rows["draw_id"].iloc[0] == "abcdef1-avx2" and rows["kernel_dispatch"].iloc[0] == "unpinned"
    assert rows["date"].isna().all()
    assert ledger.draw_rows(results, draw_id="mine")["draw_id"].iloc[0] == "mine"


def test_seeds_per_arm_fall_back_to_the_claims_counts_without_a_text():
    draw = ledger.Draw("d", SHA, "abc", None, "cpu", "avx2", "unpinned", None, None, "v2")
    rows = ledger.v2_rows(_claims_csv().drop(columns="ours"), draw)
    assert rows["seeds_method"].tolist()[:2] == [10, 10] and rows["seeds_method"].isna().tolist()[2]


@pytest.mark.parametrize("break_it, message", [
    (lambda results: (results / "REPORT.md").unlink(), "a partial draw: no .*REPORT.md"),
    (lambda results: (results / "tables" / "claims.csv").unlink(), "a partial draw: no .*claims.csv"),
    (lambda results: (results / "reproduce_seconds.txt").unlink(), "a partial draw: no .*reproduce_seconds.txt"),
])
def test_a_partial_draw_is_refused(tmp_path, break_it, message):
    results = finished_tree(tmp_path)
    break_it(results)
    with pytest.raises(ledger.DrawError, match=message):
        ledger.draw_rows(results)


def test_a_partial_rerun_is_refused(tmp_path):
    with pytest.raises(ledger.DrawError, match="a partial draw: .* did not start from an empty results tree"):
        ledger.draw_rows(finished_tree(tmp_path, started="no"))


def test_a_run_without_a_readable_revision_record_is_refused(tmp_path):
    results = finished_tree(tmp_path)
    (results / "runs" / RUNS[0] / "git_revision.txt").write_text("revision: abc\n")
    with pytest.raises(ledger.DrawError, match="git_revision.txt is not a revision record: it does not hold"):
        ledger.draw_rows(results)
    (results / "runs" / RUNS[0] / "git_revision.txt").write_text("revision: abc\ndirty: maybe\n")
    with pytest.raises(ledger.DrawError, match="a dirty draw: .*dirty: maybe in "):  # only 'false' is clean
        ledger.draw_rows(results)


def test_a_dirty_draw_is_refused(tmp_path):
    with pytest.raises(ledger.DrawError, match=r"a dirty draw: 1 of 3 runs .*dirty: true in .*seed1"):
        ledger.draw_rows(finished_tree(tmp_path, dirty={1: "true"}))


def test_an_analysis_with_uncommitted_edits_is_refused(tmp_path):
    results = finished_tree(tmp_path)
    report = results / "REPORT.md"
    report.write_text(report.read_text().replace("abcdef123456", "abcdef123456+edits"))
    with pytest.raises(ledger.DrawError, match="a dirty draw: REPORT.md was generated .* uncommitted edits"):
        ledger.draw_rows(results)


@pytest.mark.parametrize("label", ["abcdef123456+edits?", "unknown"])
def test_an_analysis_by_code_of_unknown_state_is_refused(tmp_path, label):
    """A report written where git could not say (outside a checkout: "unknown", or an unknown edit state) names no
    code that made its verdicts."""
    results = finished_tree(tmp_path)
    report = results / "REPORT.md"
    report.write_text(report.read_text().replace("abcdef123456", label))
    with pytest.raises(ledger.DrawError, match="whose edits git could not tell"):
        ledger.draw_rows(results)


def test_a_draw_mixing_code_revisions_is_refused(tmp_path):
    other = "1234567" + SHA[7:]
    with pytest.raises(ledger.DrawError, match=f"mix 2 code revisions \\({other}, {SHA}\\)"):
        ledger.draw_rows(finished_tree(tmp_path, revisions={2: other}))


def test_a_draw_mixing_machines_is_refused(tmp_path):
    avx2 = {**CPU, "model": "1", "flags": {**CPU["flags"], "avx512f": False}}
    with pytest.raises(ledger.DrawError, match="mix machines: 2 CPU types and 1 kernel dispatches"):
        ledger.draw_rows(finished_tree(tmp_path, machines={0: _machine(avx2)}))
    with pytest.raises(ledger.DrawError, match="mix machines: 1 CPU types and 2 kernel dispatches"):
        ledger.draw_rows(finished_tree(tmp_path / "unpinned", machines={0: _machine(pinned=False)}))


def test_append_adds_a_draw_atomically_and_refuses_a_draw_id_already_recorded(tmp_path):
    path = tmp_path / "ledger.csv"
    rows = ledger.draw_rows(finished_tree(tmp_path), date="2026-12-06")
    ledger.append(path, rows)
    before = path.read_bytes()
    with pytest.raises(ledger.DrawError, match="draw abcdef1-avx512 is already in .*ledger.csv"):
        ledger.append(path, rows)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir() if p.is_file()] == ["ledger.csv"]
    again = ledger.append(path, rows.assign(draw_id="abcdef1-avx512-again"))
    assert again["draw_id"].value_counts().tolist() == [3, 3]
    pd.testing.assert_frame_equal(ledger.read_ledger(path), again)  # what was written reads back equal


def test_the_script_appends_a_finished_draw_and_exits_naming_a_refusal(tmp_path):
    script = load_script("analysis/ledger.py")
    results, path = finished_tree(tmp_path), tmp_path / "ledger.csv"
    script.main(["append", "--results", str(results), "--ledger", str(path), "--date", "2026-12-06"])
    assert ledger.read_ledger(path)["date"].unique().tolist() == ["2026-12-06"]
    with pytest.raises(SystemExit, match="not appended .*already in"):
        script.main(["append", "--results", str(results), "--ledger", str(path)])
    before = path.read_bytes()
    script.main(["append", "--results", str(results), "--ledger", str(path), "--skip-recorded"])
    assert path.read_bytes() == before
    # a draw recorded without its runs' fingerprints gets them from a retaken snapshot, and only them
    table = ledger.read_ledger(path)
    ledger.write_ledger(path, table.assign(runs_sha256=pd.NA))
    script.main(["append", "--results", str(results), "--ledger", str(path), "--skip-recorded"])
    assert path.read_bytes() == before
    (results / "runs" / RUNS[0] / "checkpoints" / "step30" / "model.safetensors").write_bytes(b"other runs")
    with pytest.raises(SystemExit, match="not appended .*recorded with another fingerprint"):
        script.main(["append", "--results", str(results), "--ledger", str(path), "--skip-recorded"])
    assert path.read_bytes() == before
    (results / "reproduce_seconds.txt").write_text("900 seconds; started from an empty results/tiny: no\n")
    with pytest.raises(SystemExit, match="not appended .*a partial draw"):  # refusals still refuse
        script.main(["append", "--results", str(results), "--ledger", str(path), "--skip-recorded"])


# ---------------------------------------------------------------------------------------------------------------
# the same runs read again: tasks, fingerprints, repeats


STATIC = "DARA-Asym's held-out accuracy is not lower than Static-Asym's"
REGIME = "on toolcall, format starts sparser than correctness and DARA up-weights it"


def test_a_claims_task_comes_from_claims_csv_else_from_its_text():
    assert [ledger.task_from_text(text) for text in (A, B, STABLE.format("0.99", ""), STATIC, REGIME)] == [
        "toolcall", "toolcall", "math_length", "math_length", "toolcall"]
    assert ledger.task_from_text("DARA beats GDPO") is None
    claims = pd.DataFrame({"claim": [A, B, "DARA beats GDPO"], "task": ["toolcall_dense", "", None]})
    assert ledger.claim_tasks(claims).tolist() == ["toolcall_dense", "toolcall", pd.NA]  # the column wins
    assert ledger.claim_tasks(claims.drop(columns="task")).tolist() == ["toolcall", "toolcall", pd.NA]


def test_the_fingerprint_is_the_tasks_runs_last_checkpoints_by_path(tmp_path):
    results = finished_tree(tmp_path)
    rows = ledger.draw_rows(results)
    assert rows["task"].tolist() == ["toolcall", "toolcall", "math_length"]
    fingerprint = ledger.runs_fingerprint(results, "toolcall")
    assert rows["runs_sha256"].tolist()[:2] == [fingerprint] * 2 and len(fingerprint) == 64
    assert pd.isna(rows["runs_sha256"].iloc[2])  # the tree trained no math_length run: nothing to fingerprint
    run = results / "runs" / RUNS[0]
    (run / "checkpoints" / "step0" / "model.safetensors").write_bytes(b"an earlier checkpoint, not the end")
    assert ledger.runs_fingerprint(results, "toolcall") == fingerprint
    (run / "checkpoints" / "step30" / "model.safetensors").write_bytes(b"other final weights")
    changed = ledger.runs_fingerprint(results, "toolcall")
    assert changed != fingerprint
    (run / "checkpoints" / "step100").mkdir()
    with pytest.raises(ledger.DrawError, match="a partial draw: no .*step100/model.safetensors"):
        ledger.runs_fingerprint(results, "toolcall")
    (run / "checkpoints" / "step100").rmdir()
    extra = results / "runs" / "toolcall" / "grpo" / "G4" / "seed0"
    shutil.copytree(run, extra)
    assert ledger.runs_fingerprint(results, "toolcall") != changed  # one run more: other runs
    shutil.rmtree(extra / "checkpoints")
    with pytest.raises(ledger.DrawError, match="a partial draw: .*grpo/G4/seed0 has no checkpoint"):
        ledger.runs_fingerprint(results, "toolcall")
    with pytest.raises(ledger.DrawError, match="no runs of math_length under"):
        ledger.runs_fingerprint(results, "math_length")


def test_append_marks_a_draw_of_the_same_runs_by_its_fingerprint(tmp_path):
    path, results = tmp_path / "ledger.csv", finished_tree(tmp_path)
    rows = ledger.draw_rows(results)
    ledger.append(path, rows.assign(draw_id="d1"))
    ledger.append(path, rows.assign(draw_id="d2", analysis_revision="another"))  # the same runs, read again
    table = ledger.append(path, rows.assign(draw_id="d3"))
    repeats = table.set_index(["draw_id", "task"])["same_runs_as"]
    assert repeats.loc[("d2", "toolcall")].tolist() == ["d1", "d1"] and repeats.loc[("d3", "toolcall")].tolist() == [
        "d1", "d1"]  # d3 is d1's runs, not d2's
    assert table.loc[table["task"] == "math_length", "same_runs_as"].isna().all()  # no fingerprint: none known
    assert table.loc[table["draw_id"] == "d1", "same_runs_as"].isna().all()
    run = results / "runs" / RUNS[1]
    (run / "checkpoints" / "step30" / "model.safetensors").write_bytes(b"a new draw's weights")
    table = ledger.append(path, ledger.draw_rows(results).assign(draw_id="d4"))
    assert table.loc[table["draw_id"] == "d4", "same_runs_as"].isna().all()


def test_a_new_draw_of_runs_marked_as_repeated_is_the_first_draws_and_one_call_may_bring_both(tmp_path):
    path, results = tmp_path / "ledger.csv", finished_tree(tmp_path)
    rows = ledger.draw_rows(results)
    ledger.append(path, rows.assign(draw_id="first", runs_sha256=pd.NA))  # before the fingerprints (650b268)
    ledger.append(path, rows.assign(draw_id="remade"))  # its runs again, with fingerprints (20be9fc)
    ledger.write_ledger(path, ledger.mark_repeat(ledger.read_ledger(path), "remade", "toolcall", "first"))
    table = ledger.append(path, rows.assign(draw_id="third"))
    assert table.loc[(table["draw_id"] == "third") & (table["task"] == "toolcall"), "same_runs_as"].eq("first").all()
    both = ledger.append(tmp_path / "two.csv", pd.concat([rows.assign(draw_id="a"), rows.assign(draw_id="b")]))
    assert both.loc[both["draw_id"] == "b", "same_runs_as"].fillna("-").tolist() == ["a", "a", "-"]
    with pytest.raises(ledger.DrawError, match="c is given as the same runs as nowhere, which is not recorded"):
        ledger.append(path, rows.assign(draw_id="c", same_runs_as="nowhere"))


def test_marks_made_in_either_order_name_the_first_draw(tmp_path):
    table = _ledger({draw: {A: ("supported", -5.0)} for draw in ("d1", "d2", "d3")})
    backwards = ledger.mark_repeat(ledger.mark_repeat(table, "d3", "toolcall", "d2"), "d2", "toolcall", "d1")
    assert backwards["same_runs_as"].fillna("-").tolist() == ["-", "d1", "d1"]
    assert _view(backwards).loc[A, "draws agreeing"] == "1/1"
    circle = ledger.conform(table.assign(same_runs_as=table["draw_id"].map({"d1": "d2", "d2": "d1"})))
    with pytest.raises(ledger.DrawError, match="repeats of toolcall run in a circle: d1 -> d2"):
        ledger.mark_repeat(circle, "d3", "toolcall", "d1")


def test_mark_repeat_records_an_earlier_draws_runs_and_refuses_what_does_not_hold(tmp_path):
    table = _ledger({"d1": {A: ("supported", -5.0), STATIC: ("supported", 1.0)},
                     "d2": {A: ("supported", -4.0), STATIC: ("supported", 1.0)},
                     "d3": {A: ("supported", -4.0)}})
    marked = ledger.mark_repeat(table, "d2", "toolcall", "d1")
    assert marked.set_index(["draw_id", "task"])["same_runs_as"].dropna().to_dict() == {("d2", "toolcall"): "d1"}
    chained = ledger.mark_repeat(marked, "d3", "toolcall", "d2")
    assert chained.loc[chained["draw_id"] == "d3", "same_runs_as"].tolist() == ["d1"]  # d2's runs are d1's
    for arguments, message in ((("d4", "toolcall", "d1"), "no draw d4"),
                               (("d1", "toolcall", "d2"), "d2 was not recorded before d1"),
                               (("d3", "math_length", "d1"), r"d3 has no claim on math_length \(its claims' tasks: "
                                                             r"toolcall\)"),
                               (("d2", "toolcall", "d2"), "d2 was not recorded before d2")):
        with pytest.raises(ledger.DrawError, match=message):
            ledger.mark_repeat(marked, *arguments)
    printed = table.assign(runs_sha256=table["draw_id"].map({"d1": "aa", "d2": "bb", "d3": "aa"}))
    with pytest.raises(ledger.DrawError, match="fingerprints of d2's and d1's runs of toolcall differ"):
        ledger.mark_repeat(printed, "d2", "toolcall", "d1")
    assert ledger.mark_repeat(printed, "d3", "toolcall", "d1").loc[lambda t: t["draw_id"] == "d3", "same_runs_as"].eq(
        "d1").all()
    other = ledger.conform(table.assign(same_runs_as=table["draw_id"].map({"d3": "d2"})))  # d3 as d2's, d2 alone
    with pytest.raises(ledger.DrawError, match="d3's runs of toolcall are already marked as d2's"):
        ledger.mark_repeat(other, "d3", "toolcall", "d1")
    assert ledger.mark_repeat(other, "d3", "toolcall", "d2").equals(other)  # marking it again changes nothing


def test_record_fingerprints_fills_a_recorded_draw_and_refuses_another_trees_runs(tmp_path):
    path, results = tmp_path / "ledger.csv", finished_tree(tmp_path)
    rows = ledger.draw_rows(results)
    ledger.append(path, rows.assign(runs_sha256=pd.NA))  # recorded before the fingerprints
    filled = ledger.record_fingerprints(ledger.read_ledger(path), rows)
    assert filled["runs_sha256"].tolist() == rows["runs_sha256"].tolist()
    with pytest.raises(ledger.DrawError, match="no draw other-avx512 in the ledger: append it instead"):
        ledger.record_fingerprints(filled, rows.assign(draw_id="other-avx512"))
    with pytest.raises(ledger.DrawError, match="recorded with another fingerprint .*the tree holds other runs"):
        ledger.record_fingerprints(filled, rows.assign(runs_sha256="f" * 64))
    with pytest.raises(ledger.DrawError, match="the rows of one draw are needed, got 0 draws"):
        ledger.record_fingerprints(filled, rows.iloc[:0])
    # a later draw recorded without them whose tree has an earlier draw's fingerprint: marked as that draw's runs
    ledger.write_ledger(path, filled)
    later = ledger.append(path, rows.assign(draw_id="later", runs_sha256=pd.NA))
    marked = ledger.record_fingerprints(later, rows.assign(draw_id="later"))
    assert marked.loc[marked["draw_id"] == "later", "same_runs_as"].fillna("-").tolist() == [
        "abcdef1-avx512", "abcdef1-avx512", "-"]
    # marked as repeating a draw whose fingerprint is another: the mark or the tree is wrong
    wrong = ledger.mark_repeat(ledger.conform(later.assign(runs_sha256=later["runs_sha256"].where(
        later["draw_id"] != "abcdef1-avx512", "e" * 64))), "later", "toolcall", "abcdef1-avx512")
    with pytest.raises(ledger.DrawError, match="marked as abcdef1-avx512's, whose fingerprint is another"):
        ledger.record_fingerprints(wrong, rows.assign(draw_id="later"))


def test_the_scripts_fingerprint_and_mark_repeat_write_the_ledger_or_leave_it_naming_why(tmp_path):
    script = load_script("analysis/ledger.py")
    path, results = tmp_path / "ledger.csv", finished_tree(tmp_path)
    rows = ledger.draw_rows(results)
    ledger.append(path, pd.concat([rows.assign(draw_id="d0", runs_sha256=pd.NA), rows.assign(runs_sha256=pd.NA)]))
    script.main(["fingerprint", "--results", str(results), "--ledger", str(path)])
    table = ledger.read_ledger(path)
    assert table.loc[table["draw_id"] == "abcdef1-avx512", "runs_sha256"].tolist() == rows["runs_sha256"].tolist()
    script.main(["mark-repeat", "--draw", "abcdef1-avx512", "--task", "toolcall", "--same-runs-as", "d0",
                 "--ledger", str(path)])
    before = path.read_bytes()
    assert ledger.read_ledger(path)["same_runs_as"].dropna().tolist() == ["d0", "d0"]
    with pytest.raises(SystemExit, match="left as it is: abcdef1-avx512 was not recorded before d0"):
        script.main(["mark-repeat", "--draw", "d0", "--task", "toolcall", "--same-runs-as", "abcdef1-avx512",
                     "--ledger", str(path)])
    assert path.read_bytes() == before


def test_the_views_count_each_set_of_runs_once_and_say_whose_runs_a_draw_re_reads(tmp_path):
    table = _ledger({"d1": {A: ("supported", -5.0), B: ("not significant", -1.0)},
                     "d2": {A: ("supported", -5.0), B: ("not significant", -2.0), STATIC: ("supported", 1.0)},
                     "d3": {A: ("not significant", -1.0), B: ("supported", 1.0)},
                     "d4": {B: ("supported", 2.0)}}, same_runs={"d2": "d1"})
    view = _view(table)
    assert view.loc[A, "draws agreeing"] == "1/2"  # d1 and d3; d2 re-reads d1's runs
    assert view.loc[A, "d2"] == "supported, -5 [-6, -4] (runs of d1)"
    assert view.loc[B, "draws agreeing"] == "2/3"  # d1, d3, d4
    assert view.loc[STATIC, "draws agreeing"] == "1/1"  # d1 lacks the claim: d2's reading of its runs is the one
    assert ledger.independent(table[table["claim"] == A])["draw_id"].tolist() == ["d1", "d3"]
    assert ledger.independent(table[table["claim"] == STATIC])["draw_id"].tolist() == ["d2"]
    document = ledger.claims_document(table)
    draws = ledger.read_markdown_table(document.split("## Draws")[1].split("## Claims")[0]).set_index("draw")
    assert draws.loc["d2", "same runs as"] == "d1 (math_length, toolcall)" and draws.loc["d1", "same runs as"] == ""
    path = ledger.effects_figure(table, tmp_path / "effects.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_recorded_repeat_names_an_earlier_draw_of_that_task_that_repeats_none():
    table = ledger.read_ledger(LEDGER)
    order = ledger.draw_order(table)
    for row in table.dropna(subset=["same_runs_as"]).itertuples():
        assert order.index(row.same_runs_as) < order.index(row.draw_id), row.draw_id
        earlier = table[(table["draw_id"] == row.same_runs_as) & (table["task"] == row.task)]
        assert len(earlier) and earlier["same_runs_as"].isna().all(), (row.draw_id, row.task)


# ---------------------------------------------------------------------------------------------------------------
# the backfilled draws


RECORDED_DRAWS = ["6cea2fa-avx2", "25ec3c9-avx512", "4eb8cf2-avx512", "89eea1b-avx2"]


def _recorded(table):
    """The committed ledger's draws recorded before it existed (later draws are appended after them)."""
    return table[table["draw_id"].isin(RECORDED_DRAWS)].reset_index(drop=True)


def test_the_backfilled_ledger_holds_the_four_recorded_draws_with_their_tables_claims_in_date_order():
    everything = ledger.read_ledger(LEDGER)
    assert ledger.draw_order(everything)[:4] == RECORDED_DRAWS  # the recorded draws first, appended ones after
    table = _recorded(everything)
    script = load_script("analysis/ledger.py")
    draws = ledger.draw_order(table)
    assert draws == RECORDED_DRAWS
    assert table.groupby("draw_id", sort=False)["date"].first().is_monotonic_increasing
    for draw, recorded in zip(draws, script.RECORDED):
        claims = ledger.read_markdown_table(script.recorded_file(f"{recorded.folder}/claims.md"))
        rows = table[table["draw_id"] == draw]
        assert rows["claim"].tolist() == claims["claim"].tolist(), draw
        assert rows["verdict"].tolist() == claims["verdict"].tolist(), draw
    assert set(table["claim_rules"]) == {"v1"} and set(table["kernel_dispatch"]) == {"unpinned"}
    assert table["p_adjusted"].isna().all() and set(table["warm_starts"]) == {1}
    first = table.groupby("draw_id", sort=False).first()
    assert first["reproduce_seconds"].tolist() == [2128, 1696, 1366, 1903]  # 35:28, 28:16, 22:46, 31:43
    assert first["vector_type"].tolist() == ["avx2", "avx512", "avx512", "avx2"]


def test_backfill_is_repeatable_and_keeps_appended_draws(tmp_path):
    script = load_script("analysis/ledger.py")
    path = tmp_path / "ledger.csv"
    script.backfill(path)
    # from nothing, backfill writes the committed file's recorded draws
    assert ledger.read_ledger(path).equals(_recorded(ledger.read_ledger(LEDGER)))
    path.write_bytes(LEDGER.read_bytes())
    script.backfill(path)
    assert path.read_bytes() == LEDGER.read_bytes()  # and on the committed file, it changes nothing
    ledger.append(path, ledger.draw_rows(finished_tree(tmp_path), date="2026-12-06"))
    with_new = path.read_bytes()
    script.backfill(path)
    assert path.read_bytes() == with_new


def test_the_timing_and_machine_records_parse():
    timing = load_script("analysis/ledger.py").recorded_file("docs/results/timing.md")
    assert ledger.timing_from_markdown(timing) == (1903, 63.13)
    with pytest.raises(ledger.DrawError, match="a partial draw: .*started from an empty results/tiny: no"):
        ledger.timing_from_markdown(timing.replace("`results/tiny` | yes |", "`results/tiny` | no (a partial rerun) |"))
    machine = load_script("analysis/ledger.py").recorded_file("docs/results/second_machine/machine.txt")
    assert ledger.machine_from_lscpu(machine) == ("AMD EPYC (family 25, model 17)", "avx512")


# ---------------------------------------------------------------------------------------------------------------
# the view of claims across draws


def _ledger(cells: dict[str, dict[str, tuple[str, float]]], rules="v2", same_runs: dict | None = None) -> pd.DataFrame:
    """A constructed ledger: draw -> claim -> (verdict, effect); ``same_runs``: draw -> the earlier draw whose runs
    (of every task) it re-reads."""
    rows = []
    for draw, claims in cells.items():
        for claim, (verdict, effect) in claims.items():
            rows.append({"draw_id": draw, "training_revision": SHA, "analysis_revision": "abc", "date": "2026-12-06",
                         "cpu_model": "cpu", "vector_type": "avx2", "kernel_dispatch": "unpinned",
                         "seeds_method": 10, "seeds_baseline": 10, "warm_starts": 5, "reproduce_seconds": 1500,
                         "core_minutes": 50.0, "claim": claim, "claim_kind": ledger.claim_kind(claim),
                         "claim_rules": rules, "effect": effect, "ci_low": effect - 1, "ci_high": effect + 1,
                         "p_raw": 0.01, "p_adjusted": 0.02, "verdict": verdict,
                         "task": ledger.task_from_text(claim), "runs_sha256": None,
                         "same_runs_as": (same_runs or {}).get(draw)})
    return ledger.conform(pd.DataFrame(rows))


A = "DARA-Sym reaches format 0.8 on toolcall (G=4) in fewer steps than GDPO"
B = "DARA-Sym's final held-out accuracy is not lower than GDPO's"
STABLE = "DARA-Sym reaches a stable {} length reward on math_length (window 6, confirmed over 10 steps{}) in fewer " \
         "steps than GDPO"


def _view(table: pd.DataFrame) -> pd.DataFrame:
    lines = [line for line in ledger.claims_by_draws(table).splitlines() if line.startswith("|")]
    return ledger.read_markdown_table("\n".join(lines)).set_index("claim")


def test_claims_by_draws_counts_the_most_common_verdict_of_the_draws_that_have_the_claim():
    table = _ledger({
        "d1": {A: ("supported", -5.0), B: ("supported", -1.0), STABLE.format("0.9", ""): ("inconclusive", 0.0)},
        "d2": {A: ("supported", -4.0), B: ("refuted", -7.0),
               STABLE.format("0.99", "; no GDPO or DARA seed confirms any threshold"): ("inconclusive", 0.0)},
        "d3": {A: ("not significant", -1.0), B: ("not significant", -3.0)},
    })
    view = _view(table)
    assert list(view.columns) == ["d1", "d2", "d3", "draws agreeing"]
    assert view.loc[A, "draws agreeing"] == "2/3"  # two supported, one not significant
    assert view.loc[B, "draws agreeing"] == "1/3"  # three verdicts, one each
    stable = ledger.claim_key(STABLE.format("0.9", ""))
    assert view.loc[stable, "draws agreeing"] == "2/2" and view.loc[stable, "d3"] == "-"  # d3 lacks it
    assert view.loc[stable, "d2"] == "inconclusive, +0 [-1, +1] (threshold 0.99)"
    assert view.loc[A, "d1"] == "supported, -5 [-6, -4]"
    assert ledger.agreement(["supported", "supported"]) == "2/2"


def test_claim_keys_match_thresholds_and_remarks_and_nothing_else():
    assert ledger.claim_key(STABLE.format("0.95", "")) == ledger.claim_key(
        STABLE.format("0.99", "; no GDPO or DARA seed confirms any threshold"))
    assert ledger.claim_key(STABLE.format("0.9", "")) == (
        "DARA-Sym reaches a stable length reward on math_length (window 6, confirmed over 10 steps) in fewer steps "
        "than GDPO")
    assert ledger.claim_key(A) == A and ledger.claim_key(A) != ledger.claim_key(A.replace("G=4", "G=8"))
    assert ledger.claim_variant(STABLE.format("0.95", "")) == "threshold 0.95" and ledger.claim_variant(A) == ""
    assert [ledger.claim_kind(text) for text in (A, B, "DARA-Asym's share of responses over budget is not higher "
            "than Static-Asym's", "on toolcall, format starts sparser than correctness and DARA up-weights it")] == [
        "crossing", "non-inferiority", "non-inferiority", "regime"]


def test_the_views_of_the_backfilled_ledger(tmp_path):
    table = _recorded(ledger.read_ledger(LEDGER))
    view = _view(table)
    assert len(view) == 14  # the stable-length claims at 0.9, 0.95 and 0.99 are one row each
    assert view.loc["DARA-Sym's final held-out accuracy is not lower than GDPO's", "draws agreeing"] == "2/4"
    assert view.loc["DARA-Sym reaches format 0.8 on toolcall (G=8) in fewer steps than GDPO", "draws agreeing"] == "4/4"
    path = ledger.effects_figure(table, tmp_path / "effects.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 50_000
    assert (ROOT / "docs" / "results" / "ledger_effects.png").is_file()
    document = ledger.claims_document(table)
    assert "## Draws" in document and "(threshold 0.99)" in document and "35 min 28 s" in document


# ---------------------------------------------------------------------------------------------------------------
# the old tables' "ours" texts


def _nan_or(value):
    return "nan" if isinstance(value, float) and math.isnan(value) else value


@pytest.mark.parametrize("text, kind, expected", [
    ("median step 25 vs never (n=10 vs 10; crossed 7/10 vs 3/10; median difference -5 steps (95 % CI -8 to +0); "
     "log-rank p=0.0207)", "crossing", (-5.0, -8.0, 0.0, 0.0207, 10, 10)),
    ("median step 24 vs never (n=10 vs 10; crossed 9/10 vs 0/10; median difference -6 steps (95 % CI -8 to -3); "
     "log-rank p=3.82e-05)", "crossing", (-6.0, -8.0, -3.0, 3.82e-05, 10, 10)),
    ("median step 26 vs never (n=10 vs 10; crossed 6/10 vs 3/10; median difference -4 steps (95 % CI -5 to +0.5); "
     "log-rank p=0.0678)", "crossing", (-4.0, -5.0, 0.5, 0.0678, 10, 10)),
    ("median step 21 vs 23 (n=10 vs 10; crossed 10/10 vs 10/10; median difference -1.5 steps (95 % CI -3.5 to "
     "+2.5); log-rank p=0.757)", "crossing", (-1.5, -3.5, 2.5, 0.757, 10, 10)),
    ("median step never vs never (n=10 vs 10; crossed 0/10 vs 0/10; median difference +0 steps (95 % CI +0 to +0); "
     "log-rank p=n/a)", "crossing", (0.0, 0.0, 0.0, "nan", 10, 10)),
    ("53.10 vs 58.62 (base 19.90; margin 5; pooled SD 6.25; n=10 vs 10)", "non-inferiority",
     (-5.52, "nan", "nan", "nan", 10, 10)),
    ("99.06 vs 0.00 (base 0.00; margin 5; pooled SD 1.85; n=10 vs 10)", "non-inferiority",
     (99.06, "nan", "nan", "nan", 10, 10)),
    ("0.00 vs 0.00 (base 70.51; margin 5; pooled SD 0.00; n=10 vs 3); both at the metric's bound 0",
     "non-inferiority", (0.0, "nan", "nan", "nan", 10, 3)),
    ("first batch (step 0) median density format 0.04 vs correctness 0.83; weight on format 2.45 (n=46 runs)",
     "regime", ("nan", "nan", "nan", "nan", "nan", "nan")),
])
def test_the_old_ours_texts_parse(text, kind, expected):
    found = ledger.parse_ours(text, kind)
    keys = ("effect", "ci_low", "ci_high", "p_raw", "seeds_method", "seeds_baseline")
    assert tuple(_nan_or(found[key]) for key in keys) == expected


def test_the_snapshots_draw_is_the_ledgers_last_new_one():
    """make snapshot appends the draw it copies, so the committed ledger holds the snapshot's draw, and any draw
    recorded after it re-reads the same runs (a draw repeated on another CPU: `analysis/ledger.py append`) with the
    same claims and verdicts: no newer draw of other runs is left out of the snapshot."""
    revision = ledger.training_revision_from_record((ROOT / "docs" / "results" / "REVISION").read_text())
    table = ledger.read_ledger(LEDGER)
    order = ledger.draw_order(table)
    # the first draw of the snapshot's training code (a repeat of it on another CPU type has the same revision)
    mine = [draw for draw in order if set(table.loc[table["draw_id"] == draw, "training_revision"]) == {revision}]
    assert mine, f"the ledger records no draw of the snapshot's runs at {revision}"
    claims = ledger.read_markdown_table((ROOT / "docs" / "results" / "claims.md").read_text())
    for draw in order[order.index(mine[0]):]:
        assert draw == mine[0] or ledger.repeats_runs(table, draw, mine[0]), f"{draw} is a newer draw of other runs"
        rows = table[table["draw_id"] == draw]
        assert set(rows["claim_rules"]) == {"v2"}
        assert rows["claim"].tolist() == claims["claim"].tolist(), draw
        assert rows["verdict"].tolist() == claims["verdict"].tolist(), draw


def test_a_draw_repeats_runs_only_where_every_task_has_the_same_first_draw():
    rows = [("a", "toolcall", None), ("a", "math_length", None), ("b", "toolcall", "a"), ("b", "math_length", "a"),
            ("c", "toolcall", "b"), ("c", "math_length", None), ("d", "toolcall", None)]
    table = pd.DataFrame(rows, columns=["draw_id", "task", "same_runs_as"])
    assert ledger.repeats_runs(table, "b", "a") and ledger.repeats_runs(table, "a", "b")
    assert not ledger.repeats_runs(table, "c", "a")  # its math runs are new
    assert not ledger.repeats_runs(table, "d", "a") and not ledger.repeats_runs(table, "e", "a")
