"""Benchmarks: timings reported as ratios against a baseline measured in the same run."""

from __future__ import annotations

from pathlib import Path


def report(lines: list[str], out: Path | None) -> None:
    """Print a benchmark's Markdown summary and, with ``out``, write it there atomically (a README block)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        from dara.io import write_text_atomic

        write_text_atomic(out, text)
