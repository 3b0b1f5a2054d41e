"""The ledger of reproductions (docs/results/ledger.csv): each complete draw of the tiny study, one row per claim.

    python analysis/ledger.py backfill                        # the four draws recorded before the ledger existed
    python analysis/ledger.py append --results results/tiny   # a finished `make reproduce` from empty
    python analysis/ledger.py views --ledger docs/results/ledger.csv --out docs/results
    python analysis/ledger.py fingerprint --results results/tiny   # a recorded draw's runs, still on disk
    python analysis/ledger.py mark-repeat --draw 20be9fc-avx2 --task toolcall --same-runs-as 650b268-avx512

``backfill`` rebuilds the recorded draws' rows (:data:`RECORDED`, in the order they were drawn) from the tables kept
in docs/results/ and writes them first in the ledger, keeping any appended draw after them: running it twice writes
the same file. ``append`` adds the draw of a finished results tree (`dara.analysis.ledger.draw_rows`: it refuses a
partial, dirty or mixed draw, and a draw id already recorded). ``views`` writes ledger_claims.md (each claim's
verdict and effect per draw, and how many draws agree) and ledger_effects.png (each claim's effect per draw with its
interval). ``fingerprint`` writes the fingerprints of a recorded draw's runs (`dara.analysis.ledger.runs_fingerprint`)
from its results tree, for draws recorded before the ledger had them; ``mark-repeat`` records that a draw's runs of a
task are an earlier draw's, byte for byte, where its snapshot compared them (`append` finds it by the fingerprints).
The columns, the rules versions and how claims are matched across draws: `dara.analysis.ledger`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from dara.analysis import ledger
from dara.io import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
LEDGER = RESULTS / "ledger.csv"


class RecordedDraw(NamedTuple):
    """A draw recorded before the ledger: the folder of its copied tables (claims.md, REPORT.md, REVISION,
    timing.md), the machine.txt of its CPU type, and the commit that recorded the tables (its date is the draw's)."""

    folder: str
    machine: str
    recorded_by: str
    date: str
    timing: str = "timing.md"


# In the order they were drawn (docs/tiny_scale.md, "Machine dependence"). Each folder's README says which CPU type
# made it: previous_6cea2fa/ "the same CPU type as ../machine.txt" (the AVX2 one), rerun_4eb8cf2/ "the same type as
# ../machine.txt" (second_machine's AVX-512 one); the two other folders hold their own machine.txt. The dates are
# those of the commits that first recorded each folder's tables (git show -s --format=%cs <commit>).
RECORDED = (
    RecordedDraw("docs/results/previous_6cea2fa", "docs/results/machine.txt", "b2270d1", "2026-12-03"),
    RecordedDraw("docs/results/second_machine", "docs/results/second_machine/machine.txt", "1ac69df", "2026-12-03"),
    # timing.md is this draw's; timing_48bbb4a.md a second make reproduce that repeated it byte for byte (one draw)
    RecordedDraw("docs/results/second_machine/rerun_4eb8cf2", "docs/results/second_machine/machine.txt", "48bbb4a",
                 "2026-12-04"),
    RecordedDraw("docs/results", "docs/results/machine.txt", "318a87f", "2026-12-04"),
)


# The commit whose tree holds every recorded draw's tables: docs/results/ is the current snapshot's only, so the
# recorded draws are read from git at this revision, whatever the tree holds now.
RECORDED_AT = "028b1f6"


def recorded_file(path: str, root: Path = ROOT) -> str:
    """A recorded draw's file as committed at `RECORDED_AT`; an error naming the file and revision when git cannot
    show it (a shallow clone without that commit)."""
    shown = subprocess.run(["git", "-C", str(root), "show", f"{RECORDED_AT}:{path}"], capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"cannot read {path} at {RECORDED_AT} (a clone without that commit?): {shown.stderr.strip()}")
    return shown.stdout


def recorded_rows(recorded: RecordedDraw, root: Path = ROOT) -> pd.DataFrame:
    """The ledger rows of one recorded draw, from its files at `RECORDED_AT` (v1 rules, unpinned kernels)."""
    def read(name: str) -> str:
        return recorded_file(f"{recorded.folder}/{name}", root)

    training = ledger.training_revision_from_record(read("REVISION"))
    cpu_model, vector = ledger.machine_from_lscpu(recorded_file(recorded.machine, root))
    seconds, core_minutes = ledger.timing_from_markdown(read(recorded.timing))
    draw = ledger.Draw(draw_id=ledger.draw_label(training, vector), training_revision=training,
                       analysis_revision=ledger.analysis_revision_from_report(read("REPORT.md")),
                       date=recorded.date, cpu_model=cpu_model, vector_type=vector, kernel_dispatch=ledger.UNPINNED,
                       reproduce_seconds=seconds, core_minutes=core_minutes, claim_rules="v1")
    return ledger.v1_rows(read("claims.md"), draw)


def backfill(path: Path, root: Path = ROOT) -> pd.DataFrame:
    """The recorded draws first, then every other draw the ledger at ``path`` already holds, written atomically."""
    recorded = pd.concat([recorded_rows(draw, root) for draw in RECORDED], ignore_index=True)
    appended = ledger.read_ledger(path)
    appended = appended[~appended["draw_id"].isin(set(recorded["draw_id"]))]
    combined = pd.concat([recorded, appended], ignore_index=True) if len(appended) else recorded
    ledger.write_ledger(path, combined)
    return ledger.conform(combined)


def finished_date(results: Path) -> str | None:
    """The UTC date REPORT.md was last written: when the draw's analysis finished (None without one, which
    `draw_rows` refuses as a partial draw)."""
    if not (results / "REPORT.md").is_file():
        return None
    return datetime.fromtimestamp((results / "REPORT.md").stat().st_mtime, tz=timezone.utc).date().isoformat()


def views(path: Path, out: Path) -> list[Path]:
    table = ledger.read_ledger(path)
    if table.empty:
        raise SystemExit(f"{path} holds no draw: run `python analysis/ledger.py backfill` or `append` first")
    written = [write_text_atomic(out / "ledger_claims.md", ledger.claims_document(table, path.name)),
               ledger.effects_figure(table, out / "ledger_effects.png")]
    return written


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    fill = commands.add_parser("backfill", help="write the recorded draws' rows from docs/results/ (repeatable)")
    fill.add_argument("--ledger", type=Path, default=LEDGER)
    add = commands.add_parser("append", help="append the finished draw of a results tree")
    add.add_argument("--results", type=Path, required=True, help="a results tree after make reproduce from empty")
    add.add_argument("--ledger", type=Path, default=LEDGER)
    add.add_argument("--date", help="when the draw finished, YYYY-MM-DD (default: REPORT.md's date, UTC)")
    add.add_argument("--draw-id", help="instead of <training revision>-<vector type>")
    add.add_argument("--skip-recorded", action="store_true",
                     help="exit 0 when the draw's id is already recorded (a snapshot retaken from the same draw), "
                          "writing only the fingerprints of its runs where the ledger lacks them; without it that is "
                          "refused")
    prints = commands.add_parser("fingerprint", help="write a recorded draw's run fingerprints from its results tree")
    prints.add_argument("--results", type=Path, required=True, help="the draw's results tree as make reproduce left it")
    prints.add_argument("--ledger", type=Path, default=LEDGER)
    prints.add_argument("--draw-id", help="instead of <training revision>-<vector type>")
    repeat = commands.add_parser("mark-repeat", help="record that a draw's runs of a task are an earlier draw's")
    repeat.add_argument("--draw", required=True, help="the later draw's id")
    repeat.add_argument("--task", required=True, help="the task whose runs it repeats, e.g. toolcall")
    repeat.add_argument("--same-runs-as", required=True, help="the earlier draw's id")
    repeat.add_argument("--ledger", type=Path, default=LEDGER)
    show = commands.add_parser("views", help="write ledger_claims.md and ledger_effects.png")
    show.add_argument("--ledger", type=Path, default=LEDGER)
    show.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.command == "backfill":
        table = backfill(args.ledger)
        print(f"{args.ledger}: {table['draw_id'].nunique()} draws, {len(table)} rows")
    elif args.command == "append":
        try:
            rows = ledger.draw_rows(args.results, date=args.date or finished_date(args.results),
                                    draw_id=args.draw_id)
            recorded = ledger.read_ledger(args.ledger)
            if args.skip_recorded and rows["draw_id"].iloc[0] in set(recorded["draw_id"]):
                # its runs' fingerprints, where the draw was recorded without them (refused if they differ)
                filled = ledger.record_fingerprints(recorded, rows)
                changed = not filled.equals(recorded)
                if changed:
                    ledger.write_ledger(args.ledger, filled)
                print(f"{args.ledger}: draw {rows['draw_id'].iloc[0]} is already recorded; "
                      + ("its fingerprints written" if changed else "left as it is"))
                return
            ledger.append(args.ledger, rows)
        except ledger.DrawError as refused:
            sys.exit(f"not appended to {args.ledger}: {refused}")
        print(f"{args.ledger}: draw {rows['draw_id'].iloc[0]} appended ({len(rows)} claims)")
    elif args.command in ("fingerprint", "mark-repeat"):
        try:
            table = ledger.read_ledger(args.ledger)
            if args.command == "fingerprint":
                rows = ledger.draw_rows(args.results, draw_id=args.draw_id)
                table, what = ledger.record_fingerprints(table, rows), f"draw {rows['draw_id'].iloc[0]}'s fingerprints"
            else:
                table = ledger.mark_repeat(table, args.draw, args.task, args.same_runs_as)
                marked = table.loc[(table["draw_id"] == args.draw) & (table["task"] == args.task), "same_runs_as"]
                what = f"{args.draw}'s runs of {args.task} marked as {marked.iloc[0]}'s"
        except ledger.DrawError as refused:
            sys.exit(f"{args.ledger} left as it is: {refused}")
        ledger.write_ledger(args.ledger, table)
        print(f"{args.ledger}: {what}")
    else:
        for path in views(args.ledger, args.out):
            print(path)


if __name__ == "__main__":
    main()
