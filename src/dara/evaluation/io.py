"""Atomic output: a temporary file in the target's folder, then os.replace (no half-written results).

Shared by the evaluation and the paper-scale tools (`dara.verl_plugin`); plain Python, importable in the bfcl
environment too."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path


def write_atomic(path: str | os.PathLike, write: Callable[[object], object], mode: str = "w") -> Path:
    """Call ``write(handle)`` on a temporary file beside ``path`` (opened with ``mode``), then move it into place;
    on any error the temporary file is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as handle:
        temporary = Path(handle.name)
        try:
            write(handle)
        except BaseException:
            handle.close()
            temporary.unlink(missing_ok=True)
            raise
    try:
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, payload: object) -> None:
    write_atomic(path, lambda handle: json.dump(payload, handle, indent=1))


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_atomic(path, lambda handle: handle.write(text))


def write_parquet_atomic(frame, path: str | os.PathLike) -> Path:
    """A pandas DataFrame as parquet (no index)."""
    return write_atomic(path, lambda handle: frame.to_parquet(handle, index=False), mode="wb")


def append_lines_atomic(path: str | os.PathLike, lines: Iterable[str]) -> None:
    """``path`` plus ``lines`` (one per line), replacing the file in one step: it only ever holds whole appends."""
    path = Path(path)

    def write(handle) -> None:
        if path.exists():
            with path.open() as existing:
                shutil.copyfileobj(existing, handle)
        for line in lines:
            handle.write(line + "\n")

    write_atomic(path, write)
