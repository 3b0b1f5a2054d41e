"""Atomic writes for analysis outputs: a reader never sees a half-written table or figure."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd


def _atomic(path: Path, write: Callable[[Path], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_text(path, text: str) -> Path:
    return _atomic(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_csv(path, frame: pd.DataFrame) -> Path:
    return _atomic(path, lambda temporary: frame.to_csv(temporary, index=False))


def save_figure(figure, stem) -> list[Path]:
    """Save ``figure`` as ``stem.png`` (200 dpi) and ``stem.pdf``; returns both paths."""
    stem = Path(stem)
    written = []
    for suffix, options in ((".png", {"dpi": 200}), (".pdf", {})):
        target = stem.parent / f"{stem.name}{suffix}"
        written.append(
            _atomic(target, lambda temporary, s=suffix, o=options: figure.savefig(temporary, format=s[1:], bbox_inches="tight", **o))
        )
    return written
