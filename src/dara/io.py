"""Atomic outputs: write to a temporary file beside the target, then ``os.replace`` it into place.

A killed job never leaves a half-written result that looks complete, and a failed write leaves the target as it
was. One module for the trainer, evaluation, paper-scale tools and analysis; plain Python, so it imports in the
bfcl environment too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path


_UMASK = os.umask(0)
os.umask(_UMASK)  # read once: os.umask can only be read by setting it


def replace_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary_path)`` for a fresh file beside ``path``, then move it to ``path``.

    The temporary file keeps the target's suffix (writers such as ``savefig`` choose a format by it) and is
    removed on any error.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    os.close(handle)
    temporary = Path(name)
    try:
        write(temporary)
        # mkstemp creates the file readable by its owner only; give it the permissions a plain open() would
        os.chmod(temporary, 0o666 & ~_UMASK)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def write_atomic(path: str | os.PathLike, write: Callable[[object], object], mode: str = "w") -> Path:
    """Call ``write(handle)`` on a temporary file opened with ``mode``, then move it to ``path``."""

    def through_handle(temporary: Path) -> None:
        with temporary.open(mode) as handle:
            write(handle)

    return replace_atomically(path, through_handle)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return replace_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_json_atomic(path: str | os.PathLike, payload: object) -> Path:
    return write_atomic(path, lambda handle: json.dump(payload, handle, indent=1))


def write_parquet_atomic(frame, path: str | os.PathLike) -> Path:
    """A pandas DataFrame as parquet (no index)."""
    return replace_atomically(path, lambda temporary: frame.to_parquet(temporary, index=False))


def append_lines_atomic(path: str | os.PathLike, lines: Iterable[str]) -> Path:
    """``path`` plus ``lines`` (one per line), replacing the file in one step: it only ever holds whole appends."""
    path = Path(path)

    def write(handle) -> None:
        if path.exists():
            with path.open() as existing:
                shutil.copyfileobj(existing, handle)
        for line in lines:
            handle.write(line + "\n")

    return write_atomic(path, write)


def replace_dir_atomically(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary_folder)`` on a fresh folder beside ``path``, then move it to ``path``.

    A folder cannot be swapped in one step: an older ``path`` is first moved aside and removed after the new one is
    in place, so a reader sees the old folder, no folder for an instant, or the new one, never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        write(temporary)
        old = None
        if path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / path.name)
        os.replace(temporary, path)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return path


def write_csv_atomic(path: str | os.PathLike, frame, **to_csv_options) -> Path:
    """A pandas DataFrame as CSV (no index); ``to_csv_options`` (e.g. ``float_format``) go to ``DataFrame.to_csv``."""
    return replace_atomically(path, lambda temporary: frame.to_csv(temporary, index=False, **to_csv_options))
