"""Experiment files (``experiments/<scale>.yaml``): loading, validation and the run matrix.

An experiment names trainer ``settings`` (global, then per task, then per target: later blocks override earlier
ones), the ``tasks`` with their options, and ``targets``: named sweeps of methods x group sizes x seeds on one task.
The Snakemake workflow and the trainer both read runs from here, so a sweep is a config block, not copied rules.

    experiment = load_experiment("tiny")               # or a path; validated against the JSON Schema
    runs = run_matrix(experiment)                      # every distinct run of every target
    runs = run_matrix(experiment, target="group_size")
    spec = run_spec(experiment, "toolcall", "dara_sym", 8, 0)
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"
STATIC_METHODS = ("static_sym", "static_asym")


class ExperimentError(ValueError):
    """An experiment file that does not describe a valid set of runs."""


def schema() -> dict[str, Any]:
    return json.loads(resources.files("dara.schemas").joinpath("experiment.schema.json").read_text())


def _location(path) -> str:
    return "/".join(str(part) for part in path) or "<top level>"


def validate_experiment(experiment: dict[str, Any], source: str = "experiment") -> dict[str, Any]:
    """Raise ``ExperimentError`` naming the offending key if ``experiment`` breaks the schema or refers to
    unknown tasks; return it unchanged otherwise."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(experiment), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        # For additionalProperties the message itself names the unknown key; say where it sits too.
        raise ExperimentError(f"{source}: at {_location(error.absolute_path)}: {error.message}")
    from dara.tasks import TASK_NAMES

    for task in experiment["tasks"]:
        if task not in TASK_NAMES:
            raise ExperimentError(f"{source}: tasks/{task}: unknown task; known tasks: {', '.join(TASK_NAMES)}")
    for name, target in experiment["targets"].items():
        if target["task"] not in experiment["tasks"]:
            raise ExperimentError(f"{source}: targets/{name}/task: {target['task']!r} is not defined under tasks")
    return experiment


def load_experiment(scale_or_path: str | Path) -> dict[str, Any]:
    """The validated experiment of a scale name (``experiments/<name>.yaml``) or of a yaml path."""
    path = Path(scale_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = EXPERIMENTS_DIR / f"{scale_or_path}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no experiment file {path}")
    experiment = yaml.safe_load(path.read_text())
    if not isinstance(experiment, dict):
        raise ExperimentError(f"{path}: an experiment file must be a mapping, got {type(experiment).__name__}")
    validate_experiment(experiment, str(path))
    return experiment


def _settings(experiment: dict[str, Any], target_name: str, method: str) -> dict[str, Any]:
    target = experiment["targets"][target_name]
    task = experiment["tasks"][target["task"]]
    settings = {**experiment["settings"], **task.get("settings", {}), **target.get("settings", {})}
    if experiment.get("backend", "tiny") == "tiny":
        settings.pop("paper", None)
    if method in STATIC_METHODS:
        if "static_weights" not in settings:
            raise ExperimentError(f"targets/{target_name}: method {method!r} needs settings.static_weights "
                                  f"(in the target, its task or the global settings)")
        from dara.tasks import get_task

        rewards = get_task(target["task"], **task.get("options", {})).reward_names
        if len(settings["static_weights"]) != len(rewards):
            raise ExperimentError(f"targets/{target_name}: static_weights has {len(settings['static_weights'])} "
                                  f"values but task {target['task']!r} has {len(rewards)} rewards {rewards}")
    else:
        # Fixed weights belong to the static methods only; the other methods of the same sweep ignore them.
        settings.pop("static_weights", None)
    settings["task_options"] = copy.deepcopy(task.get("options", {}))
    return settings


def run_matrix(experiment: dict[str, Any], target: str | None = None) -> list[dict[str, Any]]:
    """Run specs ``{task, method, group_size, seed, settings, targets}`` of one target, or of all targets.

    A run shared by several targets (same task, method, G and seed) appears once; if the targets resolve it to
    different settings the experiment is ambiguous and this raises.
    """
    names = list(experiment["targets"]) if target is None else [target]
    runs: dict[tuple, dict[str, Any]] = {}
    for name in names:
        if name not in experiment["targets"]:
            raise ExperimentError(f"unknown target {name!r}; targets: {', '.join(experiment['targets'])}")
        block = experiment["targets"][name]
        for method in block["methods"]:
            settings = _settings(experiment, name, method)
            for group_size in block["group_sizes"]:
                for seed in block["seeds"]:
                    key = (block["task"], method, group_size, seed)
                    if key in runs:
                        if runs[key]["settings"] != settings:
                            raise ExperimentError(
                                f"run {'/'.join(map(str, key))} is in targets {runs[key]['targets'][0]!r} and "
                                f"{name!r} with different settings; give one of them another seed or task")
                        runs[key]["targets"].append(name)
                        continue
                    runs[key] = {"task": block["task"], "method": method, "group_size": group_size, "seed": seed,
                                 "settings": settings, "targets": [name]}
    return list(runs.values())


def run_spec(experiment: dict[str, Any], task: str, method: str, group_size: int, seed: int) -> dict[str, Any]:
    """The one run of the experiment with these coordinates (error if no target defines it)."""
    for run in run_matrix(experiment):
        if (run["task"], run["method"], run["group_size"], run["seed"]) == (task, method, group_size, seed):
            return run
    raise ExperimentError(f"no target of scale {experiment['scale']!r} defines run {task}/{method}/G{group_size}/"
                          f"seed{seed}")


def warm_start_settings(experiment: dict[str, Any], task: str) -> dict[str, Any]:
    """Keyword arguments of ``dara.tiny.warmstart.warm_start`` for ``task``."""
    if task not in experiment["tasks"]:
        raise ExperimentError(f"task {task!r} is not defined in experiment {experiment['scale']!r}")
    block = experiment["tasks"][task]
    settings = {**experiment.get("warm_start", {}), **block.get("warm_start", {})}
    if "model" in experiment.get("warm_start", {}) and "model" in block.get("warm_start", {}):
        settings["model"] = {**experiment["warm_start"]["model"], **block["warm_start"]["model"]}
    run_settings = {**experiment["settings"], **block.get("settings", {})}
    if "max_new_tokens" in run_settings:
        settings["max_new_tokens"] = run_settings["max_new_tokens"]
    return {"task_name": task, "task_options": copy.deepcopy(block.get("options", {})), **settings}
