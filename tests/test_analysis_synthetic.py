"""SYNTHETIC results for the analysis tests: made-up metrics and evaluations in the shared layout.

Nothing here is a result. Curves are logistic in the step with a method-dependent midpoint plus noise,
so that each statistic has a known direction (DARA crosses first, one GDPO seed never crosses).
"""

from __future__ import annotations

import json
import runpy
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit

from run_records import write_run_record

TASK_REWARDS = {
    "toolcall": ("format", "correctness"),
    "toolcall3": ("format", "correctness", "think_length"),
    "math_length": ("correctness", "length"),
    "act_critic": ("accuracy", "admissible", "format"),
}
MIDPOINT = {"grpo": 30, "gdpo": 22, "dara_sym": 14, "dara_asym": 13, "static_sym": 16, "static_asym": 15}
SPARSE = {"toolcall": "format", "toolcall3": "format", "math_length": "length", "act_critic": "format"}


def _curve(steps, midpoint, rng, low=0.02, high=0.97):
    values = low + (high - low) * expit((steps - midpoint) / 3.0)
    return np.clip(values + rng.normal(0, 0.01, len(steps)), 0, 1)


def write_run(root: Path, task: str, method: str, G: int, seed: int, n_steps: int, never: bool = False) -> Path:
    rng = np.random.default_rng(zlib.crc32(f"{task}/{method}/{G}/{seed}".encode()))  # stable across processes
    steps = np.arange(0, n_steps + 1)
    midpoint = 10_000 if never else MIDPOINT[method] + 2 * seed + (4 if G == 4 else 0)
    frame = {"step": steps}
    for reward in TASK_REWARDS[task]:
        if reward == SPARSE[task]:
            mean = _curve(steps, midpoint, rng)
        else:
            mean = _curve(steps, 5, rng, low=0.4, high=0.7)
        if task == "act_critic" and reward == "format":
            mean = -0.5 * (1 - mean)  # ACT's format is 0 with the tag and -0.5 without
        frame[f"reward/{reward}"] = mean
        density = np.clip(1 - np.abs(2 * np.abs(mean) - 1), 0, 1)
        frame[f"density/{reward}"] = density
        frame[f"weight/{reward}"] = np.ones(len(steps)) if not method.startswith("dara") else np.clip(
            np.sqrt(0.9 / np.maximum(density, 1e-3)), 1, 5)
        frame[f"active_groups/{reward}"] = density * 16
        frame[f"energy_pos/{reward}"] = density * 10
        frame[f"energy_neg/{reward}"] = density * 10
    frame["reward/sum"] = sum(frame[f"reward/{r}"] for r in TASK_REWARDS[task])
    for column in ("entropy", "response_length", "clip_fraction", "kl", "seconds"):
        frame[column] = rng.uniform(0, 1, len(steps))
    run_dir = root / "runs" / task / method / f"G{G}" / f"seed{seed}"
    write_run_record(run_dir, task, method, G, seed, warm_start=0)
    pd.DataFrame(frame).to_parquet(run_dir / "metrics.parquet", index=False)
    eval_dir = root / "eval" / task / method / f"G{G}" / f"seed{seed}"
    eval_dir.mkdir(parents=True, exist_ok=True)
    for step in range(0, n_steps + 1, 10):
        quality = float(frame[f"reward/{SPARSE[task]}"][step])
        # the layout of dara.evaluation.tiny_heldout: identity fields, held-out reward means, task metrics
        record = {"task": task, "method": method, "group_size": G, "seed": seed, "step": step,
                  "rewards": {reward: float(frame[f"reward/{reward}"][step]) for reward in TASK_REWARDS[task]}}
        if task.startswith("toolcall"):
            tool_accuracy = 0.2 + 0.3 * quality + rng.normal(0, 0.01)
            record["metrics"] = {"bfcl_accuracy": 0.85 * tool_accuracy + 0.15 * 0.9, "bfcl_accuracy_tool": tool_accuracy,
                                 "bfcl_accuracy_irrelevance": 0.9, "bfcl_format": quality}
        elif task == "math_length":
            record["metrics"] = {"accuracy": 0.5 + rng.normal(0, 0.01), "exceed": 1 - quality, "joint": 0.5 * quality}
        else:
            record["metrics"] = {"accuracy": quality, "format": quality}
        (eval_dir / f"step{step}.json").write_text(json.dumps(record))
    return run_dir


def write_synthetic_results(root: Path, n_steps: int = 60, seeds=(0, 1, 2)) -> Path:
    """A results/<scale> tree: every task, GRPO/GDPO/DARA (+ static for math), G 4 and 8 for toolcall."""
    root = Path(root)
    for task in TASK_REWARDS:
        methods = ["grpo", "gdpo", "dara_sym", "dara_asym"] + (["static_sym", "static_asym"] if task == "math_length" else [])
        for method in methods:
            # G4 for three methods only (a group-size sweep beside the main G8 matrix, as in tiny.yaml)
            for G in ((4, 8) if task == "toolcall" and method != "dara_asym" else (8,)):
                for seed in seeds:
                    never = method == "gdpo" and seed == seeds[-1] and task == "toolcall"
                    write_run(root, task, method, G, seed, n_steps, never=never)
    return root


def test_synthetic_tree_loads_with_identity_checks(tmp_path):
    """The generator's files go through the real loaders (and their path/field consistency check)."""
    from dara.analysis.run_tables import load_evaluations, load_metrics

    run_dir = write_run(tmp_path, "toolcall", "gdpo", 4, 1, n_steps=20)
    metrics = load_metrics([run_dir / "metrics.parquet"])
    assert metrics[["task", "method", "G", "seed"]].drop_duplicates().values.tolist() == [["toolcall", "gdpo", 4, 1]]
    evaluations = load_evaluations(sorted((tmp_path / "eval").glob("**/step*.json")))
    assert evaluations["step"].tolist() == [0, 10, 20]
    assert {"rewards/format", "metrics/bfcl_format"} <= set(evaluations.columns)


def run_script(name: str, results: Path, *extra: str, metrics: bool = True, evals: bool = True) -> None:
    """Run analysis/<name>.py on a results tree, with its runs' metrics and evaluations as the workflow passes them."""
    repo = Path(__file__).resolve().parents[1]
    argv = ["--scale", "tiny", "--config", str(repo / "analysis/config.yaml"),
            "--reference-dir", str(repo / "analysis/reference"), "--out-dir", str(results)]
    if metrics:
        argv += ["--metrics", *map(str, sorted(results.glob("runs/**/metrics.parquet")))]
    if evals:
        argv += ["--evals", *map(str, sorted(results.glob("eval/**/step*.json")))]
    runpy.run_path(str(repo / "analysis" / f"{name}.py"))["main"]([*argv, *extra])
