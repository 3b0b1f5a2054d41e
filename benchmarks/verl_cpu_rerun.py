"""Rerun finished verl_cpu runs and compare each rerun with the run the workflow made: how far a verl CPU run repeats.

Run: ``make verl-cpu-rerun`` after ``make verl-cpu``, or
``python -m benchmarks.verl_cpu_rerun [--run toolcall-tiny_tool/gdpo/G4/seed0 ...] [--out FILE]``.

Each run is trained again, whole (its settings, data and seed unchanged), through
``dara.verl_backend.launch.train`` into a scratch results tree, with the thread variables Snakemake sets for the
workflow's job (``threads: 2``). Per run the table gives how many steps, from the first, the two agree on in every
reward's batch mean and the mean response length (the responses were then very likely the same), the first step at
which the taught reward (analysis/config.yaml ``backend_comparison``) reaches its threshold in each, and the largest
gap between the two curves of that reward. On one machine this measures what timing alone changes (which copy of a
prompt gets which response, batches split by late requests); against a run made on another machine it also takes
in that machine's float kernels (docs/paper_scale.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks import history, report

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = ("toolcall-tiny_tool/dara_asym/G4/seed0", "toolcall-tiny_tool/gdpo/G4/seed0",
                "math_length-tiny_math/gdpo/G4/seed0")
# what Snakemake exports for a job with `threads: 2` (snakemake/shell.py), so the rerun runs as the workflow's job
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
WORKFLOW_THREADS = "2"


def agreeing_steps(first: pd.DataFrame, second: pd.DataFrame, columns: list[str]) -> int:
    """How many steps, from the first, ``first`` and ``second`` are equal on in every column (0: they differ at the
    first step; a count, whatever the first step's number). Both are a run's metrics, one row per step; steps present
    in one only count as a difference, NaN in both as equal."""
    merged = first[["step", *columns]].merge(second[["step", *columns]], on="step", how="outer",
                                             suffixes=("_a", "_b")).sort_values("step")
    agreed = 0
    for _, row in merged.iterrows():
        if not all(row[f"{c}_a"] == row[f"{c}_b"] or (pd.isna(row[f"{c}_a"]) and pd.isna(row[f"{c}_b"]))
                   for c in columns):
            break
        agreed += 1
    return agreed


def compare_runs(original: pd.DataFrame, rerun: pd.DataFrame, reward: str, threshold: float) -> dict:
    """Both runs' metrics side by side; both must number their rows alike (`dara.runs.check_row_steps`: an original
    written before verl's steps were converted is refused, not compared one step off)."""
    from dara.analysis.crossing import first_crossing
    from dara.runs import check_row_steps

    check_row_steps(original, "the original run's metrics")
    check_row_steps(rerun, "the rerun's metrics")
    column = f"reward/{reward}"
    compared = [c for c in original.columns if c.startswith("reward/")] + ["verl/response_length/mean"]
    missing = [c for c in compared + ["step"] if c not in rerun.columns]
    if missing:
        raise ValueError(f"the rerun's metrics lack {', '.join(missing)}")
    crossing = {name: first_crossing(frame["step"].to_numpy(), frame[column].to_numpy(), threshold)
                for name, frame in (("original", original), ("rerun", rerun))}
    curves = original[["step", column]].merge(rerun[["step", column]], on="step", suffixes=("_a", "_b"))
    return {"steps": len(original), "agreeing_steps": agreeing_steps(original, rerun, compared),
            "crossing_original": crossing["original"], "crossing_rerun": crossing["rerun"],
            "largest_gap": float(np.abs(curves[f"{column}_a"] - curves[f"{column}_b"]).max())}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="append", default=None,
                        help=f"a verl run under results/verl_cpu/runs (repeatable; default: {', '.join(DEFAULT_RUNS)})")
    parser.add_argument("--out", type=Path, default=None, help="also write the table as Markdown here "
                        "(make verl-cpu-rerun: docs/results/verl_cpu_rerun.md)")
    history.add_arguments(parser)
    args = parser.parse_args(argv)

    from dara.analysis.config import load_analysis_config
    from dara.experiments import load_experiment
    from dara.runs import run_matrix
    from dara.verl_backend.launch import train

    experiment = load_experiment("verl_cpu")
    runs = {run.run_dir.split("/runs/", 1)[1]: run for run in run_matrix(experiment) if run.backend == "verl"}
    wanted = args.run or list(DEFAULT_RUNS)
    unknown = [name for name in wanted if name not in runs]
    if unknown:
        parser.error(f"not verl runs of the verl_cpu scale: {', '.join(unknown)} (known: {', '.join(sorted(runs))})")
    comparison = load_analysis_config(ROOT / "analysis" / "config.yaml", "verl_cpu")["backend_comparison"]
    os.environ.update({name: WORKFLOW_THREADS for name in THREAD_VARIABLES})
    # after the thread variables: the machine record imports torch, which reads them once
    history_file = history.history_path(args.out, args.history, args.no_history)
    recorded = history.start_run("verl_cpu_rerun", history.RERUN_SETTINGS, sys.argv[1:] if argv is None else argv) \
        if history_file else None
    rows = []
    for name in wanted:
        run = runs[name]
        original_path = ROOT / run.metrics
        if not original_path.is_file():
            parser.error(f"{original_path} is missing: run `make verl-cpu` first")
        reward, threshold = comparison[run.task]
        with tempfile.TemporaryDirectory(prefix="dara-verl-rerun-") as scratch:
            rerun = pd.read_parquet(train(dataclasses.replace(run, results=scratch), base=ROOT))
        found = compare_runs(pd.read_parquet(original_path), rerun, reward, threshold)
        rows.append({"run": name, "reward": f"{reward} >= {threshold:g}", **found,
                     "original_revision": history.run_revision(ROOT / run.run_dir)})
        print(rows[-1], flush=True)

    def step(value):
        return "never" if value is None else str(value)

    lines = ["verl_cpu runs trained a second time on this machine (same settings, data and seed, the workflow's "
             "thread count) beside the runs `make verl-cpu` made.", "",
             "| run | steps | steps equal from the first | reward | first crossing: original | first crossing: rerun | "
             "largest gap in that reward's batch mean |",
             "|---|---|---|---|---|---|---|",
             *(f"| {r['run']} | {r['steps']} | {r['agreeing_steps']} | {r['reward']} | {step(r['crossing_original'])} "
               f"| {step(r['crossing_rerun'])} | {r['largest_gap']:.3f} |" for r in rows)]
    recorded_rows = history.run_rows(recorded, history.rerun_measurements(rows)) if recorded else None
    report(lines, args.out)
    history.record(history_file, recorded_rows)


if __name__ == "__main__":
    main()
