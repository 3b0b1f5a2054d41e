"""What every script under ``analysis/`` shares: its arguments and the loading of its inputs.

Each script is called by one Snakemake rule (or by hand) as::

    python analysis/<artifact>.py --scale tiny --config analysis/config.yaml \\
        --metrics results/tiny/runs/.../metrics.parquet ... --evals results/tiny/eval/.../step20.json ... \\
        --out-dir results/tiny

Inputs are explicit file lists (the rule's inputs), so an artifact is built from exactly the runs the
workflow made for it; outputs go under ``--out-dir`` (``tables/``, ``figures/``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from dara.analysis.config import load_analysis_config
from dara.analysis.run_tables import load_evaluations, load_metrics


@dataclass
class Inputs:
    scale: str
    config: dict
    metrics: pd.DataFrame | None
    evaluations: pd.DataFrame | None
    out_dir: Path
    reference_dir: Path
    primary_models: dict[str, str] = field(default_factory=dict)

    @property
    def tables(self) -> Path:
        return self.out_dir / "tables"

    @property
    def figures(self) -> Path:
        return self.out_dir / "figures"

    def task_metrics(self, task: str) -> pd.DataFrame | None:
        return _select(self.metrics, task, self.primary_models.get(task))

    def task_evaluations(self, task: str) -> pd.DataFrame | None:
        return _select(self.evaluations, task, self.primary_models.get(task))

    def evaluations_by_model(self, task: str) -> dict[str, pd.DataFrame]:
        """Every model's evaluations of ``task`` (model "" for scales with one policy per task)."""
        return _by_model(self.evaluations, task)


def _by_model(frame: pd.DataFrame | None, task: str) -> dict[str, pd.DataFrame]:
    if frame is None:
        return {}
    matches = frame["task"].eq(task) | frame["task"].str.startswith(f"{task}-")
    return {name.removeprefix(task).removeprefix("-"): rows.reset_index(drop=True)
            for name, rows in frame[matches].groupby("task", sort=True)}


def _select(frame: pd.DataFrame | None, task: str, primary: str | None = None) -> pd.DataFrame | None:
    """Rows of one task. Paper-scale folders are ``<task>-<model>``: with several models, the task's
    primary model is taken when one is given, else this raises rather than pooling models into one table."""
    models = _by_model(frame, task)
    if len(models) > 1:
        if primary is None:
            raise ValueError(f"runs of several models of {task!r}: {sorted(models)}; name its primary model")
        if primary not in models:
            raise ValueError(f"primary model {primary!r} of {task!r} has no runs; have {sorted(models)}")
        return models[primary]
    return next(iter(models.values()), None)


def parse_inputs(description: str, argv=None) -> Inputs:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--scale", required=True, help="scale name or experiment yaml (its analysis block applies)")
    parser.add_argument("--config", default="analysis/config.yaml")
    parser.add_argument("--reference-dir", default="analysis/reference")
    parser.add_argument("--metrics", nargs="*", default=[], help="metrics.parquet files of the runs")
    parser.add_argument("--evals", nargs="*", default=[], help="step<N>.json evaluation files")
    parser.add_argument("--out-dir", required=True, help="results/<scale>: tables/ and figures/ go under it")
    parser.add_argument("--primary-models", default="",
                        help="task=model,... : the model a single-model artifact shows (paper scale)")
    args = parser.parse_args(argv)
    try:
        primary = dict(pair.split("=", 1) for pair in args.primary_models.split(",") if pair)
    except ValueError:
        parser.error(f"--primary-models must be task=model pairs separated by commas, got {args.primary_models!r}")
    config = load_analysis_config(args.config, args.scale)
    return Inputs(
        scale=config["scale"],
        config=config,
        metrics=load_metrics(args.metrics) if args.metrics else None,
        evaluations=load_evaluations(args.evals) if args.evals else None,
        out_dir=Path(args.out_dir),
        reference_dir=Path(args.reference_dir),
        primary_models=primary,
    )


def unavailable_note(artifact: str, scale: str, reason: str) -> str:
    """The Markdown an artifact writes instead of numbers when its runs do not exist at this scale."""
    return f"# {artifact} ({scale} scale)\n\nNot produced at {scale} scale: {reason}\n"
