"""Where a result came from: the code revision, the resolved settings and the machine, written beside every run.

One helper for every backend (tiny trainer, TRL, verl launcher) and the warm start, so every run folder holds
``git_revision.txt`` in one format, ``config.yaml`` with the settings that decided its metrics, and
``machine.json``: the CPU and the kernels torch dispatched to (`dara.kernels.machine_record`), which decide its
float rounding. A process that must run pinned (every workflow job) stops here, before it trains, if it is not.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from dara.io import write_json_atomic, write_text_atomic
from dara.kernels import machine_record

MACHINE_FILE = "machine.json"

PACKAGE_DIR = Path(__file__).resolve().parent


def git_revision() -> dict[str, Any]:
    """``{"revision": <sha>, "dirty": bool}`` of the checkout this code runs from; ``"unknown"``/None outside one.
    ``dirty`` ignores untracked files (results, environments), only tracked edits count."""
    try:
        sha = subprocess.run(["git", "-C", str(PACKAGE_DIR), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=30).stdout.strip()
        status = subprocess.run(["git", "-C", str(PACKAGE_DIR), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, check=True, timeout=30).stdout
        return {"revision": sha, "dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"revision": "unknown", "dirty": None}


def revision_text() -> str:
    """The contents of ``git_revision.txt``: ``revision: <sha>`` and ``dirty: true|false|unknown`` lines."""
    found = git_revision()
    dirty = {True: "true", False: "false", None: "unknown"}[found["dirty"]]
    return f"revision: {found['revision']}\ndirty: {dirty}\n"


def read_revision_record(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``git_revision.txt`` read back (`revision_text`'s inverse): ``{"revision": <sha>, "dirty": bool or
    None}``, as `git_revision` gave it; a file without both lines is a ValueError naming it."""
    path = Path(run_dir) / "git_revision.txt"
    lines = path.read_text().splitlines()
    if len(lines) < 2 or not lines[0].startswith("revision: ") or not lines[1].startswith("dirty: "):
        raise ValueError(f"{path} does not hold 'revision: <sha>' and 'dirty: true|false|unknown' lines")
    states = {"true": True, "false": False, "unknown": None}
    state = lines[1].removeprefix("dirty: ")
    if state not in states:
        raise ValueError(f"{path} says 'dirty: {state}', not one of {', '.join(states)}")
    return {"revision": lines[0].removeprefix("revision: "), "dirty": states[state]}


# REPORT.md's line naming the code that wrote it (analysis/report_md.py: `code_label`'s short revision, "unknown"
# outside a checkout, "+edits" where dirty, "+edits?" where the state is unknown)
REPORT_REVISION = re.compile(r"at code revision ([0-9a-f]+|unknown)(\+edits\??)?")


def report_revision(text: str) -> tuple[str, bool | None] | None:
    """The code a report names, as ``(revision, dirty)`` with ``dirty`` None where it says "+edits?"; None where it
    names none."""
    found = REPORT_REVISION.search(text)
    if not found:
        return None
    return found.group(1), {None: False, "+edits": True, "+edits?": None}[found.group(2)]


def without_report_revision(text: str) -> str:
    """A report's text with the code revision it names masked, so that two reports compare on their results."""
    return REPORT_REVISION.sub("at code revision <revision>", text)


def code_label(revision: str, dirty: bool | None, width: int = 7) -> str:
    """A record's code for a page: the revision cut to ``width``, "+edits" where its checkout carried uncommitted
    edits, "+edits?" where its record does not say (``dirty`` None)."""
    return revision[:width] + {True: "+edits", False: "", None: "+edits?"}[dirty]


def read_revision(run_dir: str | Path) -> str:
    """The revision a run's ``git_revision.txt`` names (`read_revision_record`'s, which checks both lines)."""
    return read_revision_record(run_dir)["revision"]


def read_machine(run_dir: str | Path) -> dict[str, Any]:
    """A run's ``machine.json``: ``{"dispatch": ..., "cpu": ...}`` as `dara.kernels.machine_record` took it."""
    return json.loads((Path(run_dir) / MACHINE_FILE).read_text())


def write_run_provenance(run_dir: str | Path, config: dict[str, Any]) -> None:
    """``config.yaml`` (the resolved settings), ``git_revision.txt`` and ``machine.json`` (the CPU and the kernel
    dispatch) in ``run_dir``, each written atomically. The machine is read first: a process that must run pinned
    and is not (`dara.kernels.enforce_pin`) raises before anything is written."""
    import yaml

    machine = machine_record()
    run_dir = Path(run_dir)
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    write_text_atomic(run_dir / "git_revision.txt", revision_text())
    write_json_atomic(run_dir / MACHINE_FILE, machine)
