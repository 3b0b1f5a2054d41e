"""What every script under ``analysis/`` shares: its arguments and the loading of its inputs.

Each script is called by one Snakemake rule (or by hand) as::

    python analysis/<artifact>.py --scale tiny --config analysis/config.yaml \\
        --metrics results/tiny/runs/.../metrics.parquet ... --evals results/tiny/eval/.../step40.json ... \\
        --out-dir results/tiny

Inputs are explicit file lists (the rule's inputs), so an artifact is built from exactly the runs the
workflow made for it; outputs go under ``--out-dir`` (``tables/``, ``figures/``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.analysis.runs import load_evaluations, load_metrics


@dataclass
class Inputs:
    scale: str
    config: dict
    metrics: pd.DataFrame | None
    evaluations: pd.DataFrame | None
    out_dir: Path
    reference_dir: Path

    @property
    def tables(self) -> Path:
        return self.out_dir / "tables"

    @property
    def figures(self) -> Path:
        return self.out_dir / "figures"

    def task_metrics(self, task: str) -> pd.DataFrame | None:
        return _select(self.metrics, task)

    def task_evaluations(self, task: str) -> pd.DataFrame | None:
        return _select(self.evaluations, task)


def _select(frame: pd.DataFrame | None, task: str) -> pd.DataFrame | None:
    """Rows of one task. Paper-scale run folders are named ``<task>-<model>``; one model per task is
    analysed at a time, and several models of one task raise rather than being pooled into one table."""
    if frame is None:
        return None
    matches = frame["task"].eq(task) | frame["task"].str.startswith(f"{task}-")
    names = sorted(frame.loc[matches, "task"].unique())
    if len(names) > 1:
        raise ValueError(f"runs of several models of {task!r}: {names}; pass one model's runs per call")
    chosen = frame[matches]
    return chosen.reset_index(drop=True) if len(chosen) else None


def parse_inputs(description: str, argv=None) -> Inputs:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--scale", required=True, choices=("smoke", "tiny", "paper"))
    parser.add_argument("--config", default="analysis/config.yaml")
    parser.add_argument("--reference-dir", default="analysis/reference")
    parser.add_argument("--metrics", nargs="*", default=[], help="metrics.parquet files of the runs")
    parser.add_argument("--evals", nargs="*", default=[], help="step<N>.json evaluation files")
    parser.add_argument("--out-dir", required=True, help="results/<scale>: tables/ and figures/ go under it")
    args = parser.parse_args(argv)
    return Inputs(
        scale=args.scale,
        config=load_analysis_config(args.config, args.scale),
        metrics=load_metrics(args.metrics) if args.metrics else None,
        evaluations=load_evaluations(args.evals) if args.evals else None,
        out_dir=Path(args.out_dir),
        reference_dir=Path(args.reference_dir),
    )


def unavailable_note(artifact: str, scale: str, reason: str) -> str:
    """The Markdown an artifact writes instead of numbers when its runs do not exist at this scale."""
    return f"# {artifact} ({scale} scale)\n\nNot produced at {scale} scale: {reason}\n"
