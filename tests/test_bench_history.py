"""The benchmark history (benchmarks/history.py, docs/results/bench_history.csv): its schema and what it refuses, an
atomic append that keeps earlier rows, the parsers of the benchmarks' Markdown views, the backfill from the views
committed at 028b1f6, and a real (tiny) run of bench_advantages appending its rows."""

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import history

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "docs" / "results" / "bench_history.csv"
SHA = "abcdef1234567890abcdef1234567890abcdef12"
OLD = "bf5bb9d"


def _run(run_id: str = "bench_trainer-20261206T120000Z", **changes) -> history.RunRecord:
    fields = {"run_id": run_id, "date": "2026-12-06", "date_kind": "measured", "benchmark": "bench_trainer",
              "settings": "toolcall, gdpo, G4, 30 steps each, one thread; 3 interleaved repetitions",
              "revision": SHA, "baseline_revision": OLD, "dirty": "false", "cpu_model": "AMD EPYC (family 25, model 1)",
              "vector_type": "avx2", "kernel_dispatch": "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE",
              "command": "python -m benchmarks.bench_trainer --out docs/results/bench_trainer.md"}
    return history.RunRecord(**{**fields, **changes})


SIDES = {"old": {"ms_per_step": 377.0, "response_length": 34.6, "sampling": 32.0, "log-probs outside the update": 18.0,
                 "update": 48.0, "other": 2.0},
         "new": {"ms_per_step": 369.0, "response_length": 34.6, "sampling": 31.0, "log-probs outside the update": 18.0,
                 "update": 50.0, "other": 2.0}}


def _rows(run: history.RunRecord | None = None) -> pd.DataFrame:
    measurements = history.trainer_measurements(SIDES, 1.02, [1.03, 1.02, 1.01], {"old": [], "new": []}, OLD)
    return history.run_rows(run or _run(), measurements)


# ---------------------------------------------------------------------------------------------------------------
# schema


def test_the_schema_names_every_column_in_order():
    assert list(history.SCHEMA) == [
        "run_id", "date", "date_kind", "benchmark", "revision", "baseline_revision", "dirty", "cpu_model",
        "vector_type", "kernel_dispatch", "settings", "case", "metric", "unit", "value", "baseline", "baseline_value",
        "ratio", "command", "source", "notes"]


def test_a_run_gives_one_row_per_measured_case_with_the_runs_cells():
    rows = _rows()
    assert rows[["case", "metric"]].values.tolist() == [
        ["step", "time per step"], ["responses", "mean response length"],
        *[[phase, "share of step time"] for phase in history.TRAINER_PHASES]]
    assert set(rows["revision"]) == {SHA} and set(rows["source"]) == {"run"}
    step = rows.iloc[0]
    assert (step["value"], step["baseline_value"], step["ratio"], step["unit"]) == (369.0, 377.0, 1.02, "ms")
    assert step["notes"] == "ratio: median over 3 interleaved repetitions of old/new step time (1.03x, 1.02x, 1.01x)"


def _broken(column: str, value, row: int = 0) -> pd.DataFrame:
    rows = _rows().astype(object)
    rows.loc[row, column] = value
    return rows


@pytest.mark.parametrize("column, value, message", [
    ("unit", "seconds", "unit must be one of"),
    ("date", "06/12/2026", "date must read YYYY-MM-DD"),
    ("date", "2026-13-01", "is not a calendar date"),
    ("date_kind", "guessed", "date_kind must be one of"),
    ("benchmark", "bench_everything", "benchmark must be one of"),
    ("revision", "HEAD", "revision must be empty or a git sha"),
    ("baseline_revision", "BF5BB9D", "baseline_revision must be empty or a git sha"),
    ("dirty", "maybe", "dirty must be empty, true or false"),
    ("vector_type", "sse2", "vector_type must be empty or one of"),
    ("kernel_dispatch", "pinned", "kernel_dispatch must be empty"),
    ("source", "somewhere", "source must be 'run' or <file>@<revision>"),
    ("case", "", "case must not be empty"),
    ("value", float("inf"), "value must be finite"),
    ("value", "fast", "value must be a number"),
    ("ratio", -1.0, "ratio must be positive"),
])
def test_a_malformed_cell_is_refused_naming_its_column(column, value, message):
    with pytest.raises(history.HistoryError, match=message):
        history.conform(_broken(column, value))


def test_rows_are_refused_when_their_comparison_or_their_run_does_not_hold_together():
    no_baseline = _rows().astype(object)
    no_baseline.loc[:, "baseline"] = ""
    with pytest.raises(history.HistoryError, match="baseline must say what"):
        history.conform(no_baseline)
    with pytest.raises(history.HistoryError, match="value is empty, so notes must say why"):
        history.conform(_broken("value", None, row=1))  # the response row, which has no notes
    assert history.conform(_broken("value", None, row=1).assign(notes="rerun never crossed"))["value"].isna()[1]
    with pytest.raises(history.HistoryError, match="dirty is true, so the run names its revision"):
        history.conform(_rows(_run(revision=None, dirty="true")))
    with pytest.raises(history.HistoryError, match="disagree on revision"):
        history.conform(_broken("revision", "1234567"))
    twice = pd.concat([_rows(), _rows().iloc[:1]], ignore_index=True)
    with pytest.raises(history.HistoryError, match="one row per run"):
        history.conform(twice)
    with pytest.raises(history.HistoryError, match=r"missing \['notes'\], unexpected \['note'\]"):
        history.conform(_rows().rename(columns={"notes": "note"}))


# ---------------------------------------------------------------------------------------------------------------
# append


def test_append_keeps_earlier_rows_and_refuses_a_run_already_recorded(tmp_path):
    path = tmp_path / "bench_history.csv"
    history.append(path, _rows())
    first = path.read_text()
    combined = history.append(path, _rows(_run("bench_trainer-20261207T080000Z", date="2026-12-07")))
    assert path.read_text().startswith(first)  # the earlier rows, byte for byte, then the new run's
    assert combined["run_id"].nunique() == 2 and len(combined) == 2 * len(_rows())
    assert history.read_history(path).equals(combined)
    before = path.read_bytes()
    with pytest.raises(history.HistoryError, match="is already in"):
        history.append(path, _rows())
    with pytest.raises(history.HistoryError, match="unit must be one of"):
        history.append(path, _broken("unit", "hours").assign(run_id="bench_trainer-20261208T000000Z"))
    assert path.read_bytes() == before


def test_an_append_that_fails_while_writing_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "bench_history.csv"
    history.append(path, _rows())
    before = path.read_bytes()

    def write_half_and_fail(frame, target, **options):
        Path(target).write_text("run_id,date\nhalf a row")
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_csv", write_half_and_fail)
    with pytest.raises(OSError, match="disk full"):
        history.append(path, _rows(_run("bench_trainer-20261207T080000Z")))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["bench_history.csv"]  # no temporary file left behind


def test_a_run_appends_to_the_committed_history_only_when_its_view_goes_to_docs_results(tmp_path):
    results = ROOT / "docs" / "results"
    assert history.history_path(results / "bench_trainer.md", None) == HISTORY
    assert history.history_path(tmp_path / "bench_trainer.md", None) is None
    assert history.history_path(None, None) is None
    assert history.history_path(tmp_path / "x.md", tmp_path / "h.csv") == tmp_path / "h.csv"
    assert history.history_path(results / "bench_trainer.md", None, no_history=True) is None


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def test_dirty_counts_edits_to_code_not_to_the_recorded_results(tmp_path):
    _git(tmp_path, "init", "-q")
    for name in ("src/code.py", "docs/results/bench_history.csv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("first\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD").strip()
    (tmp_path / "docs/results/bench_history.csv").write_text("a run appended\n")
    assert history.checkout_revision(tmp_path) == (head, "false")
    (tmp_path / "src/code.py").write_text("edited\n")
    assert history.checkout_revision(tmp_path) == (head, "true")


def test_a_run_of_this_checkout_names_its_code_machine_command_and_start():
    started = datetime(2026, 12, 6, 23, 59, 58, tzinfo=timezone.utc)
    run = history.start_run("bench_advantages", "8 prompts", ["--out", "a file.md"], now=started)
    assert (run.run_id, run.date, run.date_kind, run.source) == (
        "bench_advantages-20261206T235958Z", "2026-12-06", "measured", "run")
    assert run.revision == _git(ROOT, "rev-parse", "HEAD").strip() and run.dirty in ("true", "false")
    assert run.command == "python -m benchmarks.bench_advantages --out 'a file.md'"
    assert run.vector_type in history.VECTOR_TYPES and run.kernel_dispatch  # this machine's record


# ---------------------------------------------------------------------------------------------------------------
# the views' parsers


TRAINER_VIEW = """Step time old/new: **1.09x** (median of 3 interleaved repetitions: 1.20x, 1.09x, 1.03x; toolcall, \
gdpo, G4, 30 steps each, one thread).

| trainer | ms per step | mean response (tokens) | sampling | log-probs outside the update | update | other |
|---|---|---|---|---|---|---|
| revision 1bba11f | 279 | 34.7 | 30% | 19% | 49% | 2% |
| this checkout | 256 | 34.7 | 27% | 19% | 52% | 2% |

The old trainer ran without what it does not know: lr_warmup_updates, task_options.wrong_key_rate.
"""


def test_a_trainer_view_parses_into_its_step_response_and_phase_rows():
    parsed = history.parse_bench_trainer(TRAINER_VIEW)
    assert parsed.baseline_revision == "1bba11f"
    assert parsed.settings == "toolcall, gdpo, G4, 30 steps each, one thread; 3 interleaved repetitions"
    by_case = {row["case"]: row for row in parsed.measurements}
    assert (by_case["step"]["value"], by_case["step"]["baseline_value"], by_case["step"]["ratio"]) == (256, 279, 1.09)
    assert by_case["step"]["notes"].endswith("the old trainer ran without what it does not know: lr_warmup_updates, "
                                             "task_options.wrong_key_rate")
    assert (by_case["update"]["value"], by_case["update"]["baseline_value"], by_case["update"]["unit"]) == (52, 49, "%")
    assert by_case["responses"]["value"] == 34.7


def test_a_view_whose_table_is_not_the_benchmarks_is_refused():
    with pytest.raises(history.HistoryError, match="expected the columns"):
        history.parse_bench_trainer(TRAINER_VIEW.replace("| update | other |", "| update | rest |"))
    with pytest.raises(history.HistoryError, match="3 repetitions announced, 2 ratios given"):
        history.parse_bench_trainer(TRAINER_VIEW.replace("1.20x, 1.09x, 1.03x", "1.20x, 1.09x"))
    with pytest.raises(history.HistoryError, match="cells"):
        history.markdown_tables("| a | b |\n|---|---|\n| 1 |\n")


ADVANTAGES_VIEW = """8 prompts x 4 responses, K = 3 rewards, 1 torch thread(s), fastest of 2 calls (3 for the loop):

| method | uids | ours (ms) | loop (ms) | loop/ours |
|---|---|---|---|---|
| grpo | contiguous | 2.75 | 65.9 | 24x |
| dara_asym | shuffled | 5.42 | 85.9 | 16x |

Against verl 0.9.1's own estimators on the same batch with 1024-token responses (ours include the broadcast over \
tokens that verl's return):

| verl estimator | ours (ms) | verl (ms) | verl/ours |
|---|---|---|---|
| `grpo_vectorized (K=1)` | 22.72 | 44.96 | 2.0x |
| `gdpo` | 24.14 | 961.88 | 39.9x |

Our GDPO output equals verl's `gdpo` to 1e-4: NO.
"""


def test_an_advantages_view_parses_with_and_without_verl():
    parsed = history.parse_bench_advantages(ADVANTAGES_VIEW)
    assert parsed.settings.startswith("8 prompts x 4 responses") and not parsed.settings.endswith(":")
    rows = {(row["case"], row["metric"]): row for row in parsed.measurements}
    assert list(rows) == [("grpo, contiguous uids", "time per call"), ("dara_asym, shuffled uids", "time per call"),
                          ("grpo_vectorized (K=1), 1024-token responses", "time per call"),
                          ("gdpo, 1024-token responses", "time per call"),
                          ("gdpo, 1024-token responses", "equal to verl's output within 1e-4")]
    assert rows[("gdpo, 1024-token responses", "time per call")]["baseline"] == "verl 0.9.1's gdpo"
    assert rows[("gdpo, 1024-token responses", "equal to verl's output within 1e-4")]["value"] == 0.0  # "NO"
    without = ADVANTAGES_VIEW.split("\nAgainst verl")[0] + "\nverl not importable (No module named 'verl'): no ...\n"
    assert len(history.parse_bench_advantages(without).measurements) == 2


VERL_CPU_VIEW = """verl on CPU, `toolcall-tiny_tool-grpo-G4-seed0` of the verl_cpu scale, 6 steps, 2 repetitions per \
side run alternately; medians over steps 2-6 of each repetition, then over repetitions.

| rollout | step (s) | generation (s) | mean response length (tokens) | run wall time, Ray start-up included (s) |
|---|---|---|---|---|
| one at a time | 4.17 | 2.81 | 33.5 | 126 |
| batched | 2.08 | 0.80 | 34.2 | 107 |

Step time, one at a time / batched: **2.00x**; generation: **3.54x**.
"""


def test_a_verl_cpu_view_parses_into_the_batched_side_against_one_at_a_time():
    parsed = history.parse_bench_verl_cpu(VERL_CPU_VIEW)
    assert parsed.settings == history.verl_cpu_settings("toolcall-tiny_tool-grpo-G4-seed0", 6, 2)
    step, generation, responses, wall = parsed.measurements
    assert (step["value"], step["baseline_value"], step["ratio"]) == (2.08, 4.17, 2.0)
    assert (generation["value"], generation["ratio"]) == (0.8, 3.54)
    assert (wall["value"], wall["ratio"]) == (107, None)


@pytest.mark.parametrize("agreement", history.RERUN_AGREEMENT_COLUMNS)
def test_a_rerun_view_parses_under_either_header_and_says_never_in_its_notes(agreement):
    view = f"""verl_cpu runs trained a second time on this machine (same settings, data and seed, the workflow's \
thread count) beside the runs `make verl-cpu` made.

| run | steps | {agreement} | reward | first crossing: original | first crossing: rerun | largest gap in that \
reward's batch mean |
|---|---|---|---|---|---|---|
| toolcall-tiny_tool/gdpo/G4/seed0 | 20 | 3 | format >= 0.8 | 9 | never | 0.375 |
"""
    parsed = history.parse_verl_cpu_rerun(view)
    assert parsed.settings == history.RERUN_SETTINGS
    rows = {row["metric"]: row for row in parsed.measurements}
    assert rows[agreement]["value"] == 3  # the view's own column name: the two headers counted differently
    crossing = rows["first crossing of format >= 0.8"]
    assert (crossing["value"], crossing["baseline_value"], crossing["notes"]) == (None, 9, "rerun never crossed")
    history.run_rows(_run("verl_cpu_rerun-20261206T000000Z", benchmark="verl_cpu_rerun", baseline_revision=None),
                     parsed.measurements)  # valid rows, "never" included


def test_each_rerun_names_the_revision_its_original_run_was_trained_at(tmp_path):
    records = {"known": f"revision: {SHA}\ndirty: false\n", "outside": "revision: unknown\ndirty: unknown\n"}
    for name, text in records.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "git_revision.txt").write_text(text)
    assert history.run_revision(tmp_path / "known") == SHA
    assert history.run_revision(tmp_path / "outside") is None and history.run_revision(tmp_path / "none") is None
    reruns = [{"run": f"toolcall-tiny_tool/gdpo/G4/seed{seed}", "steps": 20, "agreeing_steps": 3,
               "reward": "format >= 0.8", "crossing_original": 9, "crossing_rerun": 8, "largest_gap": 0.25,
               "original_revision": revision} for seed, revision in ((0, SHA), (1, "1234567"))]
    rows = history.run_rows(_run("verl_cpu_rerun-20261206T000000Z", benchmark="verl_cpu_rerun",
                                 baseline_revision=None), history.rerun_measurements(reruns))
    compared = rows[rows["baseline_value"].notna()]
    assert compared["baseline_revision"].tolist() == [SHA, "1234567"]  # one per original run, within one run
    assert rows.loc[rows["metric"] == "steps", "baseline_revision"].isna().all()


# ---------------------------------------------------------------------------------------------------------------
# the committed history and its backfill


def _views_at(revision: str) -> set[str]:
    listed = _git(ROOT, "ls-tree", "-r", "--name-only", revision, "docs/results").splitlines()
    return {path for path in listed if history._VIEW.fullmatch(path)}


def test_the_committed_history_validates_and_holds_every_view_committed_at_028b1f6():
    table = history.read_history(HISTORY)
    backfilled = table[table["source"] != "run"]
    views = _views_at(history.BACKFILL_REVISION)
    assert {f"docs/results/bench_trainer_{rev}.md" for rev in ("0331429", "1bba11f", "47b4129", "734666a",
                                                               "bb45cfa")} <= views
    assert set(backfilled["source"]) == {f"{path}@{history.BACKFILL_REVISION}" for path in views}
    # what the old views do not say stays empty: no invented machine, code revision, command or measured date
    for column in ("revision", "dirty", "cpu_model", "vector_type", "kernel_dispatch", "command"):
        assert backfilled[column].isna().all(), column
    assert set(backfilled["date_kind"]) == {"recorded"}
    per_revision = backfilled[backfilled["source"].str.contains("bench_trainer_")]
    named = per_revision["source"].str.extract(r"bench_trainer_(\w+)\.md")[0]
    assert (named == per_revision["baseline_revision"]).all()


def test_backfill_is_repeatable_and_keeps_appended_runs(tmp_path):
    path = tmp_path / "bench_history.csv"
    history.backfill(path)
    committed = history.read_history(HISTORY)
    assert history.read_history(path).equals(committed[committed["source"] != "run"].reset_index(drop=True))
    path.write_bytes(HISTORY.read_bytes())
    history.backfill(path)
    assert path.read_bytes() == HISTORY.read_bytes()  # on the committed file it changes nothing
    history.append(path, _rows())
    with_run = path.read_bytes()
    history.backfill(path)
    assert path.read_bytes() == with_run


# ---------------------------------------------------------------------------------------------------------------
# a real run


def test_a_tiny_bench_advantages_run_appends_the_rows_its_view_shows(tmp_path):
    committed = HISTORY.read_bytes()
    out, path = tmp_path / "bench_advantages.md", tmp_path / "bench_history.csv"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_advantages", "--prompts", "4", "--group-size", "4",
                           "--repeats", "1", "--response-length", "8", "--out", str(out), "--history", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = history.read_history(path)
    assert rows["run_id"].nunique() == 1 and set(rows["source"]) == {"run"} and set(rows["date_kind"]) == {"measured"}
    assert rows["revision"].iloc[0] == _git(ROOT, "rev-parse", "HEAD").strip()
    assert rows["command"].iloc[0].startswith("python -m benchmarks.bench_advantages --prompts 4")
    assert rows["cpu_model"].notna().all() and rows["kernel_dispatch"].notna().all()
    shown = history.parse_bench_advantages(out.read_text())
    assert rows["settings"].iloc[0] == shown.settings
    assert rows[["case", "metric"]].values.tolist() == [[m["case"], m["metric"]] for m in shown.measurements]
    assert HISTORY.read_bytes() == committed  # a run outside docs/results never touches the committed history
