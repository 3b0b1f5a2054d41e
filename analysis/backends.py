"""Backends side by side: the same task, method, G and seeds trained by two trainers (the tiny trainer and TRL at
the CPU scales; verl on CPU and the tiny trainer at the verl_cpu scale).

Per task, the reward each trainer should teach (analysis/config.yaml `backend_comparison`): the first step its batch
mean reaches the threshold (unsmoothed, the tool study's format_t80) and its final value, per run and as medians
over seeds. Output: results/<scale>/tables/backends.{csv,md} and figures/backends.{png,pdf}. This is the check that
the hand-written trainer learns like the library trainers; docs/trl.md and docs/paper_scale.md say where their defaults differ.
"""

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dara.analysis import figures, palette
from dara.analysis.backend_pairs import compare_backends
from dara.analysis.config import load_analysis_config
from dara.analysis.crossing import MEDIAN_NAME, median_crossing_step, step_text
from dara.analysis.run_tables import load_metrics
from dara.analysis.summary import seed_band
from dara.io import write_csv_atomic, write_text_atomic
from dara.runs import run_identity

LINE_STYLES = ("-", "--", ":", "-.")


def _steps_by_seed(ran: pd.DataFrame, column: str) -> str:
    """Each seed's first crossing, in seed order: one seed's step is not a finding where runs differ by machine."""
    ordered = ran.sort_values("seed")
    return ", ".join("never" if np.isnan(step) else f"{step:g}" for step in ordered[column])


def summary_table(runs: pd.DataFrame, backends: list[str]) -> pd.DataFrame:
    rows = []
    for (task, method, group_size), group in runs.groupby(["task", "method", "G"], sort=True):
        row = {"task": task, "reward": group["reward"].iloc[0], "threshold": group["threshold"].iloc[0],
               "method": method, "G": group_size}
        for backend in backends:
            ran = group[group[f"{backend}/last_step"].notna()]
            row[f"{backend} seeds"] = len(ran)
            row[f"{backend} crossing ({MEDIAN_NAME})"] = step_text(
                median_crossing_step(ran[f"{backend}/crossing_step"], ran[f"{backend}/last_step"])) if len(ran) else "n/a"
            row[f"{backend} crossing (each seed)"] = _steps_by_seed(ran, f"{backend}/crossing_step")
            row[f"{backend} final (median)"] = round(float(ran[f"{backend}/final"].median()), 3) if len(ran) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", required=True, help="scale name or experiment yaml")
    parser.add_argument("--config", default="analysis/config.yaml")
    parser.add_argument("--own-backend", required=True, help="the scale's own backend (its columns come first)")
    parser.add_argument("--metrics", nargs="+", required=True, help="metrics.parquet of both backends' runs")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    config = load_analysis_config(args.config, args.scale)
    # each run's backend and task folder from its own record (config.yaml), checked against its folder
    identities = {path: run_identity(Path(path).parent) for path in args.metrics}
    by_backend: dict[str, list[str]] = {}
    for path in args.metrics:
        by_backend.setdefault(identities[path]["backend"], []).append(path)
    if args.own_backend not in by_backend:
        raise SystemExit(f"no run of the scale's own backend {args.own_backend!r}; got {sorted(by_backend)}")
    if len(by_backend) < 2:
        raise SystemExit(f"backends needs runs of two backends, got {sorted(by_backend)}")
    backends = [args.own_backend, *sorted(set(by_backend) - {args.own_backend})]
    metrics = {backend: load_metrics(by_backend[backend]) for backend in backends}
    tasks = sorted(set.intersection(*(set(frame["task"]) for frame in metrics.values())))
    comparisons = []
    for task in tasks:
        if task not in config["backend_comparison"]:
            raise SystemExit(f"analysis config backend_comparison names no reward for task {task!r}")
        reward, threshold = config["backend_comparison"][task]
        paths = {b: [p for p in by_backend[b] if identities[p]["task_dir"] == task] for b in backends}
        frame = compare_backends(paths, reward, threshold)
        frame.insert(0, "threshold", threshold)
        frame.insert(0, "reward", reward)
        comparisons.append(frame)
    runs = pd.concat(comparisons, ignore_index=True)
    out = Path(args.out_dir)
    write_csv_atomic(out / "tables" / "backends.csv", runs)
    table = summary_table(runs, backends)
    write_text_atomic(out / "tables" / "backends.md",
               f"# The same runs through {' and '.join(backends)} ({config['scale']} scale)\n\n"
               "First step the batch mean of the reward reaches the threshold (the median over seeds is the "
               "Kaplan-Meier one of dara.analysis.crossing: the first step by which half the seeds crossed, a seed "
               "that never crossed censored at its last step; then each seed's, in seed order) and the reward's "
               "last-step value (median over seeds).\n\n"
               + table.to_markdown(index=False) + "\n")

    figure, axes = figures.new_figure(len(tasks), width_per_panel=4.6, height=3.6)
    for ax, task in zip(axes, tasks):
        reward, threshold = config["backend_comparison"][task]
        for backend, style in zip(backends, LINE_STYLES):
            frame = metrics[backend][metrics[backend]["task"] == task]
            band = seed_band(frame, f"reward/{reward}", by=("method", "step"))
            for method in palette.ordered(band["method"].unique()):
                rows = band[band["method"] == method]
                ax.plot(rows["step"], rows["median"], linestyle=style, color=palette.color(method),
                        label=f"{palette.label(method)} ({backend}, n={int(rows['n_seeds'].max())})")
        ax.axhline(threshold, color="0.6", linewidth=0.8)
        figures.finish(ax, "training step", f"{reward}, median over seeds", f"{task}: {reward} (line: {threshold:g})",
                       legend=False)
    # every panel draws the same methods and backends: one legend, beside the panels rather than over the curves
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    figure.suptitle(f"The same runs through {' (solid) and '.join(backends)} (dashed){figures.scale_note(config)}")
    figure.tight_layout()
    figures.save_figure(figure, out / "figures" / "backends")


if __name__ == "__main__":
    main()
