"""Atomic writes for analysis outputs: a reader never sees a half-written table or figure."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dara.io import replace_atomically


def write_text(path, text: str) -> Path:
    return replace_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_csv(path, frame: pd.DataFrame) -> Path:
    return replace_atomically(path, lambda temporary: frame.to_csv(temporary, index=False))


def save_figure(figure, stem) -> list[Path]:
    """Save ``figure`` as ``stem.png`` (200 dpi) and ``stem.pdf``; returns both paths."""
    stem = Path(stem)
    written = []
    for suffix, options in ((".png", {"dpi": 200}), (".pdf", {})):
        target = stem.parent / f"{stem.name}{suffix}"
        written.append(
            replace_atomically(target, lambda temporary, s=suffix, o=options: figure.savefig(temporary, format=s[1:], bbox_inches="tight", **o))
        )
    return written
