"""The history of benchmark runs as one table: ``docs/results/bench_history.csv``, one row per measured case per run.

Each benchmark writes its latest run as a Markdown view (docs/results/bench_trainer.md, bench_advantages.md,
bench_verl_cpu.md, verl_cpu_rerun.md: the blocks the docs quote). A recorded run (``--out`` into docs/results/) also
appends its rows here, so earlier runs stay readable as data instead of as a file per revision. The runs recorded
before this table existed are backfilled from the views committed at a named revision::

    python -m benchmarks.history backfill --revision 028b1f6   # rewrites those runs' rows, keeps appended runs
    python -m benchmarks.history check                         # the committed table validates

Columns (:data:`SCHEMA`, in this order, with their pandas types; an empty cell is unknown or not given by the source):

- ``run_id`` (string): one benchmark run; its rows share it. A run appended by its benchmark:
  ``<benchmark>-<UTC start, YYYYMMDDTHHMMSSZ>``; a backfilled run: its ``source``.
- ``date`` (string, ``YYYY-MM-DD``, UTC) and ``date_kind``: ``measured`` (the day the run started) or ``recorded``
  (a backfilled run: the day of the last commit that changed its source file at the source's revision; the run was
  on that day or before).
- ``benchmark`` (string): one of :data:`BENCHMARKS`, the module under benchmarks/.
- ``revision`` (string): the code measured, the checkout's full sha (empty: the source does not say; the old views
  call it "this checkout").
- ``baseline_revision`` (string): the code the measurement is compared with where that is another revision:
  bench_trainer's old trainer (``--revision``), verl_cpu_rerun's original run (its ``git_revision.txt``).
- ``dirty`` (string): ``true`` or ``false``, whether tracked files outside docs/ had uncommitted edits when the run
  started (docs/ is left out: the benchmarks' own outputs, this table among them, change nothing measured).
- ``cpu_model``, ``vector_type``, ``kernel_dispatch`` (string): the benchmark process's machine record
  (`dara.kernels.machine_record`; its subprocesses and workers inherit its environment), written as the ledger
  writes them (`dara.analysis.ledger`): ``<model name> (family F, model M)``, ``avx2``/``avx512``/``below avx2``,
  ``unpinned`` or the pin's ``NAME=value`` variables.
- ``settings`` (string): what the run measured, in the words of its view's first line (sizes, repetitions, threads).
- ``case`` (string): what was measured, e.g. ``grpo, shuffled uids`` (bench_advantages), ``sampling`` (a phase of
  bench_trainer's step), ``step``, a verl run's name (verl_cpu_rerun).
- ``metric``, ``unit`` (string): the quantity and its unit, one of :data:`UNITS`.
- ``value`` (float64): the measured code's number (bench_trainer: this checkout; bench_advantages: ours;
  bench_verl_cpu: the batched rollout; verl_cpu_rerun: the rerun). Empty only with a ``notes`` saying why (a run
  that never crossed its threshold).
- ``baseline`` (string): what ``baseline_value`` and ``ratio`` compare with, in words; empty when nothing is.
- ``baseline_value`` (float64): the baseline's number for the same case and metric.
- ``ratio`` (float64): baseline over measured as the benchmark reports it (above 1: the measured code is faster):
  bench_trainer's is the median of the per-repetition ratios (``notes`` lists them), not the ratio of the two means.
- ``command`` (string): the command line of the run (the pin, if any, is in ``kernel_dispatch``).
- ``source`` (string): ``run`` (appended by the benchmark as it ran) or ``<file>@<revision>`` (backfilled from that
  file as git holds it at that revision).
- ``notes`` (string): what the view says beside the number (left-out settings, per-repetition ratios).

:func:`append` refuses malformed rows (:func:`conform` names the column, the value and the run) and a run already in
the table, and replaces the file in one atomic step (`dara.io.write_csv_atomic`): earlier rows are kept as they were.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
HISTORY = RESULTS / "bench_history.csv"
BACKFILL_REVISION = "028b1f6"  # the last commit whose docs/results/ held the per-revision benchmark files

# column -> pandas dtype; the module docstring says what each holds
SCHEMA: dict[str, str] = {
    "run_id": "string",
    "date": "string",
    "date_kind": "string",
    "benchmark": "string",
    "revision": "string",
    "baseline_revision": "string",
    "dirty": "string",
    "cpu_model": "string",
    "vector_type": "string",
    "kernel_dispatch": "string",
    "settings": "string",
    "case": "string",
    "metric": "string",
    "unit": "string",
    "value": "float64",
    "baseline": "string",
    "baseline_value": "float64",
    "ratio": "float64",
    "command": "string",
    "source": "string",
    "notes": "string",
}
BENCHMARKS = ("bench_trainer", "bench_advantages", "bench_verl_cpu", "verl_cpu_rerun")
UNITS = {
    "ms": "milliseconds", "s": "seconds", "%": "percent of a whole", "tokens": "tokens per response",
    "steps": "training steps (a count, or a step number as the source numbers them)",
    "reward": "points of a reward's batch mean (0 to 1)", "bool": "1 yes, 0 no",
}
DATE_KINDS = ("measured", "recorded")
VECTOR_TYPES = ("avx2", "avx512", "below avx2")
UNPINNED = "unpinned"
REQUIRED = ("run_id", "date", "date_kind", "benchmark", "settings", "case", "metric", "unit", "source")
# what every row of one run shares (baseline_revision may differ: verl_cpu_rerun's originals)
RUN_COLUMNS = ("date", "date_kind", "benchmark", "revision", "dirty", "cpu_model", "vector_type", "kernel_dispatch",
               "settings", "command", "source")
FLOAT_FORMAT = "%.6g"  # stable when the table is read and written again

_REVISION = re.compile(r"[0-9a-f]{7,40}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DISPATCH = re.compile(r"\w+=\S+( \w+=\S+)*")
_SOURCE = re.compile(r"\S+@[0-9a-f]{7,40}")


class HistoryError(ValueError):
    """Rows the history refuses: a missing or extra column, a malformed cell, a run already recorded."""


# ---------------------------------------------------------------------------------------------------------------
# schema


def _matches(column: pd.Series, pattern: re.Pattern) -> pd.Series:
    """Whether each cell matches ``pattern`` in full, as plain booleans (an empty cell does not)."""
    return column.str.fullmatch(pattern.pattern).fillna(False).astype(bool)


def _refuse(typed: pd.DataFrame, bad: pd.Series, column: str, why: str) -> None:
    if bad.any():
        first = typed.loc[bad].iloc[0]
        values = sorted({"(empty)" if pd.isna(v) else str(v) for v in typed.loc[bad, column]})
        raise HistoryError(f"{column} {why}: got {values[:5]} (run {first['run_id']}, {bad.sum()} row(s))")


def conform(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with exactly the history's columns, in order and typed; raises `HistoryError` naming the column,
    the values and the run of the first problem found. Every writer goes through it."""
    missing, extra = [c for c in SCHEMA if c not in frame.columns], [c for c in frame.columns if c not in SCHEMA]
    if missing or extra:
        raise HistoryError(f"not the benchmark history's columns: missing {missing}, unexpected {extra}")
    strings = {c: t for c, t in SCHEMA.items() if t == "string"}
    typed = frame[list(SCHEMA)].copy()
    for column in strings:  # "" and None alike mean unknown
        typed[column] = typed[column].astype("string").str.strip().replace("", pd.NA)
    for column in (c for c, t in SCHEMA.items() if t == "float64"):
        try:
            typed[column] = pd.to_numeric(typed[column].replace("", pd.NA), errors="raise").astype("float64")
        except (ValueError, TypeError) as error:
            raise HistoryError(f"{column} must be a number or empty: {error}") from None
    typed = typed.reset_index(drop=True)
    for column in REQUIRED:
        _refuse(typed, typed[column].isna(), column, "must not be empty")
    _refuse(typed, ~_matches(typed["date"], _DATE), "date", "must read YYYY-MM-DD")
    for date in typed["date"].unique():
        try:
            datetime.strptime(date, "%Y-%m-%d")
        except ValueError:
            raise HistoryError(f"date {date!r} is not a calendar date") from None
    _refuse(typed, ~typed["date_kind"].isin(DATE_KINDS), "date_kind", f"must be one of {list(DATE_KINDS)}")
    _refuse(typed, ~typed["benchmark"].isin(BENCHMARKS), "benchmark", f"must be one of {list(BENCHMARKS)}")
    for column in ("revision", "baseline_revision"):
        bad = typed[column].notna() & ~_matches(typed[column], _REVISION)
        _refuse(typed, bad, column, "must be empty or a git sha (7 to 40 lowercase hex digits)")
    _refuse(typed, typed["dirty"].notna() & ~typed["dirty"].isin(["true", "false"]).fillna(False), "dirty",
            "must be empty, true or false")
    _refuse(typed, typed["dirty"].eq("true").fillna(False) & typed["revision"].isna(), "dirty",
            "is true, so the run names its revision")
    _refuse(typed, typed["vector_type"].notna() & ~typed["vector_type"].isin(VECTOR_TYPES).fillna(False),
            "vector_type",
            f"must be empty or one of {list(VECTOR_TYPES)}")
    dispatch = typed["kernel_dispatch"]
    bad = dispatch.notna() & dispatch.ne(UNPINNED).fillna(False) & ~_matches(dispatch, _DISPATCH)
    _refuse(typed, bad, "kernel_dispatch", f"must be empty, {UNPINNED!r} or NAME=value variables")
    _refuse(typed, ~typed["unit"].isin(list(UNITS)), "unit", f"must be one of {list(UNITS)}")
    source = typed["source"]
    _refuse(typed, source.ne("run").fillna(False) & ~_matches(source, _SOURCE), "source",
            "must be 'run' or <file>@<revision>")
    for column in ("value", "baseline_value", "ratio"):
        _refuse(typed, typed[column].notna() & ~typed[column].apply(math.isfinite), column,
                "must be finite")
    _refuse(typed, typed["value"].isna() & typed["notes"].isna(), "value", "is empty, so notes must say why")
    _refuse(typed, typed["ratio"].le(0), "ratio", "must be positive")
    compared = typed["baseline_value"].notna() | typed["ratio"].notna() | typed["baseline_revision"].notna()
    _refuse(typed, compared & typed["baseline"].isna(), "baseline",
            "must say what baseline_value, ratio or baseline_revision compare with")
    repeated = typed.duplicated(["run_id", "case", "metric"], keep=False)
    _refuse(typed, repeated, "case", "and metric must name one row per run (a case measured twice)")
    for column in RUN_COLUMNS:
        disagree = typed.groupby("run_id", sort=False)[column].nunique(dropna=False) > 1
        if disagree.any():
            raise HistoryError(f"the rows of run {disagree.idxmax()} disagree on {column}: a run's rows share it")
    return typed


def empty_history() -> pd.DataFrame:
    return conform(pd.DataFrame({column: [] for column in SCHEMA}))


def read_history(path: str | Path) -> pd.DataFrame:
    """The history at ``path``, typed (:func:`conform`); an empty table when the file does not exist yet."""
    path = Path(path)
    if not path.is_file():
        return empty_history()
    strings = {c: t for c, t in SCHEMA.items() if t == "string"}
    return conform(pd.read_csv(path, dtype=strings, keep_default_na=False, na_values=[""]))


def write_history(path: str | Path, history: pd.DataFrame) -> Path:
    """The whole table to ``path`` in one atomic step (`dara.io.write_csv_atomic`)."""
    from dara.io import write_csv_atomic

    return write_csv_atomic(path, conform(history), float_format=FLOAT_FORMAT)


def append(path: str | Path, rows: pd.DataFrame) -> pd.DataFrame:
    """The history at ``path`` with ``rows`` (one run's or more) after it, written atomically; returns it. Refuses
    malformed rows and a run id already in the table, leaving the file as it was."""
    history, rows = read_history(path), conform(rows)
    if rows.empty:
        raise HistoryError("no rows to append")
    already = sorted(set(rows["run_id"]) & set(history["run_id"]))
    if already:
        raise HistoryError(f"run {', '.join(already)} is already in {path}: a run is recorded once")
    combined = pd.concat([history, rows], ignore_index=True) if len(history) else rows
    write_history(path, combined)
    return conform(combined)


# ---------------------------------------------------------------------------------------------------------------
# a run and its measurements


@dataclass(frozen=True)
class RunRecord:
    """What a run's rows share (the module docstring's columns)."""

    run_id: str
    date: str
    date_kind: str
    benchmark: str
    settings: str
    revision: str | None = None
    baseline_revision: str | None = None
    dirty: str | None = None
    cpu_model: str | None = None
    vector_type: str | None = None
    kernel_dispatch: str | None = None
    command: str | None = None
    source: str = "run"


def measurement(case: str, metric: str, unit: str, value: float | None, baseline: str | None = None,
                baseline_value: float | None = None, ratio: float | None = None, notes: str | None = None,
                baseline_revision: str | None = None) -> dict:
    """One row's own cells (the run's are added by :func:`run_rows`); a ``baseline_revision`` overrides the run's."""
    row = {"case": case, "metric": metric, "unit": unit, "value": value, "baseline": baseline,
           "baseline_value": baseline_value, "ratio": ratio, "notes": notes}
    if baseline_revision is not None:
        row["baseline_revision"] = baseline_revision
    return row


def run_rows(run: RunRecord, measurements: Iterable[dict]) -> pd.DataFrame:
    """The run's rows, one per measurement, checked (:func:`conform`)."""
    rows = [{**asdict(run), **found} for found in measurements]
    if not rows:
        raise HistoryError(f"run {run.run_id} has no measurements")
    return conform(pd.DataFrame(rows))


TRAINER_PHASES = ("sampling", "log-probs outside the update", "update", "other")  # bench_trainer's table, in order
LOOP_BASELINE = "per-group Python loop (dara.advantages_loop, float64)"


def trainer_measurements(sides: dict[str, dict], ratio: float, repetition_ratios: list[float],
                         left_out: dict[str, list[str]], baseline_revision: str,
                         supervised: dict | None = None) -> list[dict]:
    """bench_trainer's rows: the step time (ratio: the median of old/new per repetition), the mean response length,
    and each phase's share of the step. ``sides["old"]``/``["new"]`` hold ``ms_per_step``, ``response_length`` and
    the shares in percent of ``sampling``, ``log-probs outside the update``, ``update`` and ``other``.
    ``supervised`` (runs that timed warm-start steps): ``old_ms``, ``new_ms``, ``ratio`` and the per-repetition
    ``ratios``, one more row."""
    old, new = sides["old"], sides["new"]
    baseline = f"the trainer at revision {baseline_revision}"
    notes = [f"ratio: median over {len(repetition_ratios)} interleaved repetitions of old/new step time ("
             + ", ".join(f"{r:.2f}x" for r in repetition_ratios) + ")"]
    notes += [f"the {side} trainer ran without what it does not know: {', '.join(names)}"
              for side, names in left_out.items() if names]
    rows = [measurement("step", "time per step", "ms", new["ms_per_step"], baseline, old["ms_per_step"], ratio,
                        "; ".join(notes)),
            measurement("responses", "mean response length", "tokens", new["response_length"], baseline,
                        old["response_length"])]
    rows += [measurement(phase, "share of step time", "%", new[phase], baseline, old[phase])
             for phase in TRAINER_PHASES]
    if supervised is not None:
        rows.append(measurement("warm-start step", "time per step", "ms", supervised["new_ms"], baseline,
                                supervised["old_ms"], supervised["ratio"],
                                f"ratio: median over {len(supervised['ratios'])} interleaved repetitions of old/new "
                                "supervised step time (" + ", ".join(f"{r:.2f}x" for r in supervised["ratios"]) + ")"))
    return rows


def advantages_measurements(estimators: list[dict], verl: dict | None) -> list[dict]:
    """bench_advantages's rows: each estimator and uid layout against the loop (``estimators``: ``method``,
    ``uids``, ``ours_ms``, ``loop_ms``, ``ratio``), and with verl (``verl``: ``version``, ``response_length``,
    ``estimators`` as ``name``, ``ours_ms``, ``verl_ms``, ``ratio``, and ``agrees``, whether our GDPO equals
    verl's to 1e-4; None without verl)."""
    rows = [measurement(f"{e['method']}, {e['uids']} uids", "time per call", "ms", e["ours_ms"], LOOP_BASELINE,
                        e["loop_ms"], e["ratio"]) for e in estimators]
    if verl:
        length = verl["response_length"]
        rows += [measurement(f"{e['name']}, {length}-token responses", "time per call", "ms", e["ours_ms"],
                             f"verl {verl['version']}'s {e['name']}", e["verl_ms"], e["ratio"])
                 for e in verl["estimators"]]
        rows.append(measurement(f"gdpo, {length}-token responses", "equal to verl's output within 1e-4", "bool",
                                float(verl["agrees"]), f"verl {verl['version']}'s gdpo"))
    return rows


ONE_AT_A_TIME = "the same rollout serving one request at a time (DARA_HF_ROLLOUT_MAX_BATCH=1)"


def verl_cpu_measurements(alone: dict, batched: dict, step_ratio: float, generation_ratio: float) -> list[dict]:
    """bench_verl_cpu's rows: the batched rollout against one request at a time (each side: ``step_s``, ``gen_s``,
    ``response_length``, ``wall_s``, medians over repetitions)."""
    return [
        measurement("step", "time per step (median, first step left out)", "s", batched["step_s"], ONE_AT_A_TIME,
                    alone["step_s"], step_ratio),
        measurement("generation", "time per step (median, first step left out)", "s", batched["gen_s"],
                    ONE_AT_A_TIME, alone["gen_s"], generation_ratio),
        measurement("responses", "mean response length", "tokens", batched["response_length"], ONE_AT_A_TIME,
                    alone["response_length"]),
        measurement("whole run", "wall time, Ray start-up included", "s", batched["wall_s"], ONE_AT_A_TIME,
                    alone["wall_s"]),
    ]


ORIGINAL_RUN = "the run make verl-cpu made"
AGREEING_STEPS = "steps equal from the first"


def rerun_measurements(rows: list[dict], agreeing_metric: str = AGREEING_STEPS) -> list[dict]:
    """verl_cpu_rerun's rows, per rerun (``run``, ``steps``, ``agreeing_steps``, ``reward`` as "format >= 0.8",
    ``crossing_original``, ``crossing_rerun`` (None: never), ``largest_gap``, and optionally
    ``original_revision``): its steps, how many agree with the original, the first crossing of its reward in each,
    and the largest gap between their curves. ``agreeing_metric`` is the view's column name (before the step
    convention the views said "equal up to step")."""
    found = []
    for row in rows:
        revision = row.get("original_revision")
        reward = row["reward"]
        never = [f"{side} never crossed" for side in ("rerun", "original") if row[f"crossing_{side}"] is None]
        found += [
            measurement(row["run"], "steps", "steps", row["steps"]),
            measurement(row["run"], agreeing_metric, "steps", row["agreeing_steps"], ORIGINAL_RUN,
                        baseline_revision=revision),
            measurement(row["run"], f"first crossing of {reward}", "steps", row["crossing_rerun"], ORIGINAL_RUN,
                        row["crossing_original"], notes="; ".join(never) or None, baseline_revision=revision),
            measurement(row["run"], f"largest gap in {reward.split()[0]}'s batch mean", "reward", row["largest_gap"],
                        ORIGINAL_RUN, baseline_revision=revision),
        ]
    return found


# ---------------------------------------------------------------------------------------------------------------
# a run of this checkout


def checkout_revision(root: Path = ROOT) -> tuple[str | None, str | None]:
    """(full sha, ``true``/``false``) of the checkout at ``root``; dirty counts tracked edits outside docs/ (the
    benchmarks write there). (None, None) outside a git checkout."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=30).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 ":(exclude)docs"], capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha, "true" if status.strip() else "false"


def run_revision(run_dir: str | Path) -> str | None:
    """The revision a finished run's ``git_revision.txt`` names (`dara.provenance.read_revision`); None where the
    run has none or it names no sha ("unknown": trained outside a checkout)."""
    from dara.provenance import read_revision

    try:
        revision = read_revision(run_dir)
    except (OSError, ValueError):
        return None
    return revision if _REVISION.fullmatch(revision) else None


def full_revision(revision: str, root: Path = ROOT) -> str:
    """The full sha of ``revision`` (a branch, tag or short sha) in the checkout at ``root``."""
    found = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode:
        raise HistoryError(f"git knows no commit {revision!r}")
    return found.stdout.strip()


def machine_fields() -> dict[str, str | None]:
    """``cpu_model``, ``vector_type`` and ``kernel_dispatch`` of this process (`dara.kernels.machine_record`, which
    refuses a process marked to run pinned that is not), written as the ledger writes a draw's."""
    from dara.analysis.ledger import dispatch_label, vector_type
    from dara.kernels import machine_record

    record = machine_record()
    cpu = record["cpu"]
    model = (f"{cpu['model_name']} (family {cpu.get('family')}, model {cpu.get('model')})"
             if cpu.get("model_name") else None)
    return {"cpu_model": model, "vector_type": vector_type(cpu), "kernel_dispatch": dispatch_label(record["dispatch"])}


def start_run(benchmark: str, settings: str, argv: list[str], baseline_revision: str | None = None,
              root: Path = ROOT, now: datetime | None = None) -> RunRecord:
    """The record of a run of this checkout starting now: its id and UTC date, the code and machine, the command.
    Taken before the run writes anything, so the checkout's state is the one measured."""
    now = now or datetime.now(timezone.utc)
    revision, dirty = checkout_revision(root)
    return RunRecord(run_id=f"{benchmark}-{now:%Y%m%dT%H%M%SZ}", date=now.date().isoformat(), date_kind="measured",
                     benchmark=benchmark, settings=settings, revision=revision, baseline_revision=baseline_revision,
                     dirty=dirty, command=shlex.join(["python", "-m", f"benchmarks.{benchmark}", *argv]),
                     **machine_fields())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--history`` and ``--no-history`` (:func:`history_path` says which file a run appends to)."""
    parser.add_argument("--history", type=Path, default=None,
                        help="append this run's rows to this CSV (default: docs/results/bench_history.csv when --out "
                             "writes into docs/results/, a recorded run; otherwise none)")
    parser.add_argument("--no-history", action="store_true", help="append to no history, whatever --out says")


def history_path(out: str | Path | None, history: str | Path | None, no_history: bool = False,
                 results: Path = RESULTS) -> Path | None:
    """Where a run appends its rows: ``history`` when given; else the committed history when ``out`` (the Markdown
    view) lies in docs/results/, a recorded run; else nowhere (a trial run, a test)."""
    if no_history:
        return None
    if history is not None:
        return Path(history)
    if out is not None and Path(out).resolve().parent == results.resolve():
        return results / HISTORY.name
    return None


def record(path: Path | None, rows: pd.DataFrame | None) -> None:
    """Append a run's rows (:func:`run_rows`, built before its view is written, so a malformed row stops the run
    before anything is written) to the history at ``path``; nothing without a path."""
    if path is None or rows is None:
        return
    append(path, rows)
    print(f"{path}: run {rows['run_id'].iloc[0]} appended ({len(rows)} rows)")


# ---------------------------------------------------------------------------------------------------------------
# the views as they were committed: backfill


def markdown_tables(text: str) -> list[pd.DataFrame]:
    """Every pipe table of a Markdown text, in order, as strings (a header row, a separator row, body rows)."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip().startswith("|"):
            block.append(line.strip())
            continue
        if block:
            cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in block]
            if len(cells) < 2 or not set("".join(cells[1])) <= set("-: "):
                raise HistoryError(f"a table without a separator row: {block[0]}")
            wrong = [row for row in cells[2:] if len(row) != len(cells[0])]
            if wrong:
                raise HistoryError(f"table rows with other than the header's {len(cells[0])} cells: {wrong[:2]}")
            tables.append(pd.DataFrame(cells[2:], columns=cells[0]))
            block = []
    return tables


def _table(tables: list[pd.DataFrame], index: int, columns: list[str], what: str) -> pd.DataFrame:
    if len(tables) <= index:
        raise HistoryError(f"{what}: no table {index + 1} in the view")
    if list(tables[index].columns) != columns:
        raise HistoryError(f"{what}: expected the columns {columns}, got {list(tables[index].columns)}")
    return tables[index]


def _number(cell: str) -> float:
    text = cell.strip().strip("*`").removesuffix("%").removesuffix("x").strip()
    try:
        return float(text)
    except ValueError:
        raise HistoryError(f"not a number: {cell!r}") from None


def _search(pattern: str, text: str, what: str) -> re.Match:
    found = re.search(pattern, text)
    if not found:
        raise HistoryError(f"{what}: the view has no line matching {pattern!r}")
    return found


@dataclass(frozen=True)
class Parsed:
    """What a view says: its settings line, the baseline revision where it names one, the measurements."""

    settings: str
    measurements: list[dict]
    baseline_revision: str | None = None


TRAINER_COLUMNS = ["trainer", "ms per step", "mean response (tokens)", *TRAINER_PHASES]


def parse_bench_trainer(text: str) -> Parsed:
    """bench_trainer.md (and the old bench_trainer_<rev>.md): the headline ratio, the per-side table, what the old
    trainer left out."""
    head = _search(r"Step time old/new: \*\*([\d.]+)x\*\* \(median of (\d+) interleaved repetitions: ([^;]+); "
                   r"([^)]*)\)\.", text, "bench_trainer")
    table = _table(markdown_tables(text), 0, TRAINER_COLUMNS, "bench_trainer")
    sides, baseline_revision = {}, None
    for _, row in table.iterrows():
        old = re.fullmatch(r"revision ([0-9a-f]{7,40})", row["trainer"])
        if old:
            baseline_revision, side = old.group(1), "old"
        elif row["trainer"] == "this checkout":
            side = "new"
        else:
            raise HistoryError(f"bench_trainer: a trainer row is 'revision <sha>' or 'this checkout', not "
                               f"{row['trainer']!r}")
        sides[side] = {"ms_per_step": _number(row["ms per step"]),
                       "response_length": _number(row["mean response (tokens)"]),
                       **{phase: _number(row[phase]) for phase in TRAINER_PHASES}}
    if set(sides) != {"old", "new"}:
        raise HistoryError(f"bench_trainer: the table has rows {sorted(sides)}, not an old and a new trainer")
    left_out = {side: [name.strip() for name in names.split(",")] for side, names in
                re.findall(r"The (old|new) trainer ran without what it does not know: (.+)\.", text)}
    repetitions = [_number(r) for r in head.group(3).split(",")]
    if len(repetitions) != int(head.group(2)):
        raise HistoryError(f"bench_trainer: {head.group(2)} repetitions announced, {len(repetitions)} ratios given")
    # the warm-start step, in views written since bench_trainer timed it
    warm = re.search(r"Warm-start step old/new: \*\*([\d.]+)x\*\* \(median of \d+ interleaved repetitions: ([^;]+);"
                     r"[^)]*\): ([\d.]+) ms at revision \S+, ([\d.]+) ms in this checkout\.", text)
    supervised = None if warm is None else {
        "ratio": _number(warm.group(1)), "ratios": [_number(r) for r in warm.group(2).split(",")],
        "old_ms": _number(warm.group(3)), "new_ms": _number(warm.group(4))}
    measurements = trainer_measurements(sides, _number(head.group(1)), repetitions, left_out, baseline_revision,
                                        supervised)
    return Parsed(trainer_settings(head.group(4), int(head.group(2))), measurements, baseline_revision)


def trainer_settings(run_text: str, repeats: int) -> str:
    """bench_trainer's settings cell from its view's "toolcall, dara_sym, G8, 5 steps each, one thread"."""
    return f"{run_text}; {repeats} interleaved repetitions"


def parse_bench_advantages(text: str) -> Parsed:
    """bench_advantages.md: the estimators against the loop and, where verl was importable, against verl's."""
    settings = text.strip().splitlines()[0].strip().removesuffix(":")
    tables = markdown_tables(text)
    ours = _table(tables, 0, ["method", "uids", "ours (ms)", "loop (ms)", "loop/ours"], "bench_advantages")
    estimators = [{"method": row["method"], "uids": row["uids"], "ours_ms": _number(row["ours (ms)"]),
                   "loop_ms": _number(row["loop (ms)"]), "ratio": _number(row["loop/ours"])}
                  for _, row in ours.iterrows()]
    verl = None
    against = re.search(r"Against verl (\S+)'s own estimators on the same batch with (\d+)-token responses", text)
    if against:
        table = _table(tables, 1, ["verl estimator", "ours (ms)", "verl (ms)", "verl/ours"], "bench_advantages")
        agrees = _search(r"Our GDPO output equals verl's `gdpo` to 1e-4: (yes|NO)", text, "bench_advantages")
        verl = {"version": against.group(1), "response_length": int(against.group(2)),
                "estimators": [{"name": row["verl estimator"].strip("`"), "ours_ms": _number(row["ours (ms)"]),
                                "verl_ms": _number(row["verl (ms)"]), "ratio": _number(row["verl/ours"])}
                               for _, row in table.iterrows()],
                "agrees": agrees.group(1) == "yes"}
    return Parsed(settings, advantages_measurements(estimators, verl))


VERL_CPU_COLUMNS = ["rollout", "step (s)", "generation (s)", "mean response length (tokens)",
                    "run wall time, Ray start-up included (s)"]


def parse_bench_verl_cpu(text: str) -> Parsed:
    """bench_verl_cpu.md: the batched rollout against one request at a time."""
    settings = _search(r"verl on CPU, (.+?); medians over", text, "bench_verl_cpu").group(1).replace("`", "")
    table = _table(markdown_tables(text), 0, VERL_CPU_COLUMNS, "bench_verl_cpu").set_index("rollout")
    if set(table.index) != {"one at a time", "batched"}:
        raise HistoryError(f"bench_verl_cpu: rollout rows are 'one at a time' and 'batched', not {list(table.index)}")
    sides = {name: {key: _number(table.loc[name, column]) for key, column in
                    zip(("step_s", "gen_s", "response_length", "wall_s"), VERL_CPU_COLUMNS[1:])}
             for name in table.index}
    ratios = _search(r"Step time, one at a time / batched: \*\*([\d.]+)x\*\*; generation: \*\*([\d.]+)x\*\*", text,
                     "bench_verl_cpu")
    measurements = verl_cpu_measurements(sides["one at a time"], sides["batched"], _number(ratios.group(1)),
                                         _number(ratios.group(2)))
    return Parsed(settings, measurements)


def verl_cpu_settings(run_name: str, steps: int, repeats: int) -> str:
    return f"{run_name} of the verl_cpu scale, {steps} steps, {repeats} repetitions per side run alternately"


RERUN_AGREEMENT_COLUMNS = (AGREEING_STEPS, "equal up to step")  # today's header, and the one before the step convention
RERUN_SETTINGS = "same settings, data and seed, the workflow's thread count"


def parse_verl_cpu_rerun(text: str) -> Parsed:
    """verl_cpu_rerun.md: each rerun against its original."""
    settings = _search(r"trained a second time on this machine \(([^)]*)\)", text, "verl_cpu_rerun").group(1)
    tables = markdown_tables(text)
    header = list(tables[0].columns) if tables else []
    agreement = header[2] if len(header) > 2 and header[2] in RERUN_AGREEMENT_COLUMNS else AGREEING_STEPS
    table = _table(tables, 0, ["run", "steps", agreement, "reward", "first crossing: original",
                               "first crossing: rerun", "largest gap in that reward's batch mean"], "verl_cpu_rerun")

    def step(cell: str) -> float | None:
        return None if cell == "never" else _number(cell)

    rows = [{"run": row["run"], "steps": _number(row["steps"]), "agreeing_steps": _number(row[agreement]),
             "reward": row["reward"], "crossing_original": step(row["first crossing: original"]),
             "crossing_rerun": step(row["first crossing: rerun"]),
             "largest_gap": _number(row["largest gap in that reward's batch mean"])} for _, row in table.iterrows()]
    return Parsed(settings, rerun_measurements(rows, agreement))


PARSERS = {"bench_trainer": parse_bench_trainer, "bench_advantages": parse_bench_advantages,
           "bench_verl_cpu": parse_bench_verl_cpu, "verl_cpu_rerun": parse_verl_cpu_rerun}
# a benchmark's view, or a copy named after the revision it compared with (bench_trainer_<rev>.md)
_VIEW = re.compile(r"docs/results/(?P<benchmark>" + "|".join(BENCHMARKS) + r")(?:_(?P<revision>[0-9a-f]{7,40}))?\.md")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"git {' '.join(args)} failed (a clone without that commit?): {done.stderr.strip()}")
    return done.stdout


def backfilled_run(path: str, revision: str, root: Path = ROOT) -> pd.DataFrame:
    """The rows of the view ``path`` as git holds it at ``revision``: only what it says, its date the UTC day of the
    last commit that changed it there (``recorded``), its source ``path@revision``."""
    matched = _VIEW.fullmatch(path)
    if not matched:
        raise HistoryError(f"{path} is no benchmark view (docs/results/<benchmark>[_<revision>].md)")
    benchmark = matched.group("benchmark")
    parsed = PARSERS[benchmark](_git(root, "show", f"{revision}:{path}"))
    named = matched.group("revision")
    if named and not (parsed.baseline_revision or "").startswith(named):
        raise HistoryError(f"{path} is named after revision {named} but compares with {parsed.baseline_revision}")
    seconds = int(_git(root, "log", "-1", "--format=%ct", revision, "--", path).strip())
    source = f"{path}@{revision}"
    run = RunRecord(run_id=source, date=datetime.fromtimestamp(seconds, tz=timezone.utc).date().isoformat(),
                    date_kind="recorded", benchmark=benchmark, settings=parsed.settings,
                    baseline_revision=parsed.baseline_revision, source=source)
    return run_rows(run, parsed.measurements)


def backfilled_rows(revision: str = BACKFILL_REVISION, root: Path = ROOT) -> pd.DataFrame:
    """Every benchmark view under docs/results/ at ``revision``, in the order they were committed."""
    short = _git(root, "rev-parse", "--verify", f"{revision}^{{commit}}").strip()[:7]
    paths = [p for p in _git(root, "ls-tree", "-r", "--name-only", short, "docs/results").splitlines()
             if _VIEW.fullmatch(p)]
    if not paths:
        raise HistoryError(f"no benchmark view under docs/results/ at {revision}")
    committed = {p: int(_git(root, "log", "-1", "--format=%ct", short, "--", p).strip()) for p in paths}
    runs = [backfilled_run(p, short, root) for p in sorted(paths, key=lambda p: (committed[p], p))]
    return conform(pd.concat(runs, ignore_index=True))


def backfill(path: Path, revision: str = BACKFILL_REVISION, root: Path = ROOT) -> pd.DataFrame:
    """The backfilled runs first, then every other run the history at ``path`` already holds, written atomically:
    running it again writes the same file."""
    recorded = backfilled_rows(revision, root)
    kept = read_history(path)
    kept = kept[~kept["run_id"].isin(set(recorded["run_id"]))]
    combined = pd.concat([recorded, kept], ignore_index=True) if len(kept) else recorded
    write_history(path, combined)
    return conform(combined)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fill = commands.add_parser("backfill", help="rewrite the rows of the views committed at a revision")
    fill.add_argument("--revision", default=BACKFILL_REVISION)
    fill.add_argument("--history", type=Path, default=HISTORY)
    check = commands.add_parser("check", help="read the history and validate every row")
    check.add_argument("--history", type=Path, default=HISTORY)
    args = parser.parse_args(argv)
    try:
        table = backfill(args.history, args.revision) if args.command == "backfill" else read_history(args.history)
    except HistoryError as refused:
        raise SystemExit(f"{args.history}: {refused}") from None
    print(f"{args.history}: {table['run_id'].nunique()} runs, {len(table)} rows")


if __name__ == "__main__":
    main()
