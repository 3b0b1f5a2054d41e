"""Where evaluation results live and which checkpoints a run has, from an experiment (dara.experiments).

    results/{scale}/eval/{task}/{method}/G{G}/seed{seed}/step{N}.json

At paper scale `task` is `<task>-<model>`, as in the run folder. Used by workflow/rules/evaluate.smk and by
the analysis to find every checkpoint's evaluation; no Snakemake here.
"""

from __future__ import annotations

from typing import Any


def checkpoint_steps(steps: int, eval_every: int) -> list[int]:
    """Steps the tiny trainer saves checkpoints at: 0, every `eval_every`, and the last."""
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be >= 1, got {steps}, {eval_every}")
    return sorted({0, steps, *range(0, steps, eval_every)})


def paper_checkpoint_steps(steps: int, save_freq: int) -> list[int]:
    """Steps verl saves at with `trainer.save_freq`: every `save_freq` steps and the last."""
    if steps < 1 or save_freq < 1:
        raise ValueError(f"steps and save_freq must be >= 1, got {steps}, {save_freq}")
    return sorted({*range(save_freq, steps + 1, save_freq), steps})


def eval_dir(scale: str, task: str, method: str, group_size: int, seed: int) -> str:
    return f"results/{scale}/eval/{task}/{method}/G{group_size}/seed{seed}"


def run_eval_files(experiment: dict[str, Any], run) -> list[str]:
    """step{N}.json of every checkpoint of one run: a tiny/smoke run spec (`dara.experiments.run_matrix`) or a
    paper run (`dara.verl_plugin.launch.PaperRun`, whose resolved settings give steps and verl's save_freq)."""
    scale = experiment["scale"]
    if experiment.get("backend", "tiny") == "tiny":
        task, steps = run["task"], checkpoint_steps(run["settings"]["steps"], run["settings"]["eval_every"])
        method, group_size, seed = run["method"], run["group_size"], run["seed"]
    else:
        save_freq = run.settings.get("verl", {}).get("trainer.save_freq", run.settings["steps"])
        task, steps = run.run_task, paper_checkpoint_steps(run.settings["steps"], save_freq)
        method, group_size, seed = run.method, run.group_size, run.seed
    folder = eval_dir(scale, task, method, group_size, seed)
    return [f"{folder}/step{step}.json" for step in steps]


def eval_files(experiment: dict[str, Any], target: str | None = None, task: str | None = None) -> list[str]:
    """Per-checkpoint evaluation files of a target's runs (every target by default), optionally of one task."""
    if experiment.get("backend", "tiny") == "tiny":
        from dara.experiments import run_matrix

        runs = [run for run in run_matrix(experiment, target) if task in (None, run["task"])]
    else:
        from dara.verl_plugin.launch import paper_runs

        runs = [run for run in paper_runs(experiment, target) if task in (None, run.task)]
    return list(dict.fromkeys(f for run in runs for f in run_eval_files(experiment, run)))
