"""Time verl's CPU training step with the batched hf rollout against the same rollout serving one request at a time.

Run: ``make bench-verl-cpu`` (which first builds the verl_cpu scale's tool-calling data), or
``python -m benchmarks.bench_verl_cpu [--steps 6] [--repeats 2] [--out docs/results/bench_verl_cpu.md]``.

Both sides are the same run of the verl_cpu scale (its first verl run of ``--task``: settings, data, seed), trained
through ``dara.verl_backend.launch.train`` for ``--steps`` steps into a scratch results tree, with no validation and
one checkpoint. The one difference is ``DARA_HF_ROLLOUT_MAX_BATCH`` in the run's worker environment: unset (requests
that arrive together form one batch, `dara.verl_plugin.cpu_backend.hf_rollout.HFServer`) or 1 (one at a time, the
server as it was before batching). The sides alternate (one-at-a-time, batched, one-at-a-time, ...), so load on the
machine hits both alike. A step's time is verl's own ``timing_s/step`` (generation, rewards, log-probs, advantages,
update; Ray's start-up left out), and ``timing_s/gen`` its generation; step 1 is left out of the medians (its first
batch warms caches up). Batching draws other random numbers, so the sides' responses differ: their mean response
length is printed, since a step's cost grows with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import history, report

ROOT = Path(__file__).resolve().parents[1]
SIDES = {"one at a time": "1", "batched": None}


def bench_run(task: str):
    from dara.experiments import load_experiment
    from dara.runs import run_matrix

    experiment = load_experiment("verl_cpu")
    runs = [run for run in run_matrix(experiment) if run.backend == "verl" and run.task == task]
    if not runs:
        raise SystemExit(f"the verl_cpu scale has no verl run of task {task!r}")
    return runs[0]


def train_side(run, steps: int, max_batch: str | None, scratch: Path) -> dict:
    import pandas as pd

    from dara.verl_backend.launch import train

    env = dict(run.settings.get("env", {}))
    if max_batch is not None:
        env["DARA_HF_ROLLOUT_MAX_BATCH"] = max_batch
    verl = {**run.settings["verl"], "trainer.save_freq": steps, "trainer.test_freq": -1}
    settings = {**run.settings, "steps": steps, "env": env, "verl": verl}
    side = dataclasses.replace(run, settings=settings, results=str(scratch))
    started = time.perf_counter()
    metrics = pd.read_parquet(train(side, base=ROOT))
    later = metrics[metrics["step"] > 0]  # row 0 is verl's step 1 (dara.verl_backend.logs), left out
    return {"step_s": float(later["seconds"].median()), "gen_s": float(later["verl/timing_s/gen"].median()),
            "response_length": float(metrics["verl/response_length/mean"].mean()),
            "wall_s": time.perf_counter() - started, "steps": len(metrics)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="toolcall")
    parser.add_argument("--steps", type=int, default=6, help="training steps per repetition (step 1 is left out)")
    parser.add_argument("--repeats", type=int, default=2, help="pairs of repetitions, run alternately")
    parser.add_argument("--out", type=Path, default=None, help="also write the summary as Markdown here "
                        "(make bench-verl-cpu: docs/results/bench_verl_cpu.md, a README block)")
    history.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error("--steps must be at least 3 (step 1 is left out of the medians)")
    run = bench_run(args.task)
    data = ROOT / run.settings["data_dir"] / run.settings["dataset"] / "train.parquet"
    if not data.is_file():
        parser.error(f"no verl data at {data}: build it with `snakemake --cores 2 {data} --config scale=verl_cpu`")
    history_file = history.history_path(args.out, args.history, args.no_history)
    recorded = history.start_run("bench_verl_cpu", history.verl_cpu_settings(run.name, args.steps, args.repeats),
                                 sys.argv[1:] if argv is None else argv) if history_file else None
    results: dict[str, list[dict]] = {name: [] for name in SIDES}
    for repeat in range(args.repeats):
        for name, max_batch in SIDES.items():
            with tempfile.TemporaryDirectory(prefix="dara-bench-verl-") as scratch:
                found = train_side(run, args.steps, max_batch, Path(scratch))
            results[name].append(found)
            print(f"repeat {repeat + 1}, {name}: {found}", flush=True)
    summary = {name: {key: statistics.median(r[key] for r in found) for key in ("step_s", "gen_s", "response_length",
                                                                              "wall_s")}
               for name, found in results.items()}
    alone, batched = summary["one at a time"], summary["batched"]
    lines = [
        f"verl on CPU, `{run.name}` of the verl_cpu scale, {args.steps} steps, {args.repeats} repetitions per side "
        f"run alternately; medians over steps 2-{args.steps} of each repetition, then over repetitions.",
        "",
        "| rollout | step (s) | generation (s) | mean response length (tokens) | run wall time, Ray start-up included (s) |",
        "|---|---|---|---|---|",
        *(f"| {name} | {s['step_s']:.2f} | {s['gen_s']:.2f} | {s['response_length']:.1f} | {s['wall_s']:.0f} |"
          for name, s in summary.items()),
        "",
        f"Step time, one at a time / batched: **{alone['step_s'] / batched['step_s']:.2f}x**; generation: "
        f"**{alone['gen_s'] / batched['gen_s']:.2f}x**.",
    ]
    rows = history.run_rows(recorded, history.verl_cpu_measurements(
        alone, batched, alone["step_s"] / batched["step_s"], alone["gen_s"] / batched["gen_s"])) if recorded else None
    report(lines, args.out)
    history.record(history_file, rows)


if __name__ == "__main__":
    main()
