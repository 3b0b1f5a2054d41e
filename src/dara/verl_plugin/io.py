"""Atomic file output for the paper-scale tools: a reader never sees a half-written file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary)`` on a temporary file in ``path``'s folder, then move it into place with os.replace."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_parquet_atomic(frame, path: str | Path) -> Path:
    return write_atomic(path, lambda temporary: frame.to_parquet(temporary, index=False))
