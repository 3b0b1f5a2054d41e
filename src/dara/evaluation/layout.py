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


def paper_run_length(experiment: dict[str, Any], run: dict[str, Any], model: str) -> tuple[int, int]:
    """(steps, save_freq) of a paper run: settings.paper -> task -> model -> target, as the verl launcher merges."""
    paper = experiment["settings"].get("paper", {})

    def task_paper_settings(task: str) -> dict[str, Any]:
        own = experiment["tasks"][task].get("settings", {}).get("paper", {})
        if "inherit" not in own:  # `inherit: <task>`: every setting not given here comes from that task
            return own
        base = task_paper_settings(own["inherit"])
        return {**base, **own, "verl": {**base.get("verl", {}), **own.get("verl", {})}}

    # Mirrors the verl launcher's merge order; switch to its resolver once dara.verl_plugin.launch exposes one.
    task_paper = task_paper_settings(run["task"])
    model_paper = paper.get("models", {}).get(model, {})
    merged = {**paper, **task_paper, **model_paper, **run["settings"].get("paper", {})}
    verl = {**paper.get("verl", {}), **task_paper.get("verl", {}), **model_paper.get("verl", {})}
    if "steps" not in merged:
        raise ValueError(f"paper run {run['task']}/{model}: no 'steps' in its settings")
    return merged["steps"], verl.get("trainer.save_freq", merged["steps"])


def run_eval_files(experiment: dict[str, Any], run: dict[str, Any], model: str | None = None) -> list[str]:
    """step{N}.json of every checkpoint of one run spec (`model` only at paper scale)."""
    scale = experiment["scale"]
    if experiment.get("backend", "tiny") == "tiny":
        task, steps = run["task"], checkpoint_steps(run["settings"]["steps"], run["settings"]["eval_every"])
    else:
        if model is None:
            raise ValueError("paper-scale runs need their model")
        task, steps = f"{run['task']}-{model}", paper_checkpoint_steps(*paper_run_length(experiment, run, model))
    folder = eval_dir(scale, task, run["method"], run["group_size"], run["seed"])
    return [f"{folder}/step{step}.json" for step in steps]


def eval_files(experiment: dict[str, Any], target: str | None = None, task: str | None = None) -> list[str]:
    """Per-checkpoint evaluation files of a target's runs (every target by default), optionally of one task."""
    from dara.experiments import run_matrix

    files: list[str] = []
    for run in run_matrix(experiment, target):
        if task not in (None, run["task"]):
            continue
        if experiment.get("backend", "tiny") == "tiny":
            files += run_eval_files(experiment, run)
        else:
            models = experiment["settings"]["paper"]["target_models"]
            names = run["targets"] if target is None else [target]
            for model in dict.fromkeys(m for name in names for m in models[name]):
                files += run_eval_files(experiment, run, model)
    return list(dict.fromkeys(files))
