"""Experiment files (``experiments/<scale>.yaml``): schema, defaults and settings resolution.

An experiment names trainer ``settings`` (global, then per task, then per target: later blocks override earlier
ones), the ``tasks`` with their options, ``warm_start`` and ``evaluation`` settings, and ``targets``: named sweeps
of methods x group sizes x seeds on one task. Every default lives in the JSON Schema
(``src/dara/schemas/experiment.schema.json``) and is filled in by `load_experiment`; no trainer, evaluation or
workflow code keeps a second default. The method enum of the schema comes from `dara.methods`.

Paper-scale (verl) experiments add a ``paper`` block at each level (``settings.paper`` -> ``tasks.<task>.settings
.paper``, after its ``inherit`` -> the model's entry -> ``targets.<target>.settings.paper``), merged deeply by
`paper_settings`; the ``verl`` mappings inside hold Hydra overrides by dotted key, merged key by key.

Runs, their folders and the run matrix are in `dara.runs`, which asks this module for each run's settings:

    experiment = load_experiment("tiny")                      # or a path; validated, defaults filled in
    settings = run_settings(experiment, "toolcall", "dara_sym")
    warm = warm_start_settings(experiment, "toolcall")
"""

from __future__ import annotations

import copy
import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dara.methods import METHODS, get_method

# Scale names (`tiny`, `smoke`, ...) are the files of a checkout's experiments/ folder, or of the folder named by
# DARA_EXPERIMENTS_DIR (a copy to edit without touching the checkout; an installed package, which has no checkout).
EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"
EXPERIMENTS_DIR_VARIABLE = "DARA_EXPERIMENTS_DIR"


def experiments_dir() -> Path:
    """Where scale names are looked up: $DARA_EXPERIMENTS_DIR if set, else the checkout's experiments/."""
    return Path(os.environ[EXPERIMENTS_DIR_VARIABLE]) if os.environ.get(EXPERIMENTS_DIR_VARIABLE) else EXPERIMENTS_DIR


# The settings a verl run reads from the shared (non-paper) settings as they are ...
VERL_SHARED_KEYS = ("w_max", "batch_norm", "static_weights")
# ... and the CPU trainers' settings a verl run takes in verl's vocabulary, where an experiment states them (the
# verl_cpu scale, whose tiny-trainer twins must be told the same thing): what each becomes, "verl/<key>" for a key of
# the run's verl block, a bare name for a paper setting. Each fact is stated once: in the shared settings or in
# verl's words, never both. Every other shared key is the CPU trainers' alone. kl_coef, minibatches,
# lr_warmup_updates and lr_schedule have rules of their own (`_translated_for_verl`).
VERL_EQUIVALENT_KEYS = {
    "steps": "steps",
    "responses_per_step": "responses_per_step",
    "learning_rate": "verl/actor_rollout_ref.actor.optim.lr",
    "clip_ratio": "verl/actor_rollout_ref.actor.clip_ratio",
    "entropy_coef": "verl/actor_rollout_ref.actor.entropy_coeff",
    "max_grad_norm": "verl/actor_rollout_ref.actor.grad_clip",
    "temperature": "verl/actor_rollout_ref.rollout.temperature",
    "max_new_tokens": "verl/data.max_response_length",
    "eval_every": "verl/trainer.save_freq",             # the CPU trainers checkpoint at eval_every, verl at save_freq
    "minibatches": "mini_batch_responses",              # responses_per_step / minibatches
    "lr_warmup_updates": "verl/actor_rollout_ref.actor.optim.lr_warmup_steps",
    "lr_schedule": "verl/actor_rollout_ref.actor.optim.lr_scheduler_type",  # verl's names: constant, cosine
    "kl_coef": "verl/actor_rollout_ref.actor.kl_loss_coef",
}
# kl_coef is the tiny trainer's k3 KL to the warm start, in the loss: verl's actor KL loss of type low_var_kl (k3,
# clipped to [-10, 10]), switched on where the coefficient is positive.
VERL_KL_KEYS = ("verl/actor_rollout_ref.actor.use_kl_loss", "verl/actor_rollout_ref.actor.kl_loss_type")


class ExperimentError(ValueError):
    """An experiment file that does not describe a valid set of runs."""


@cache
def _schema_text() -> str:
    return resources.files("dara.schemas").joinpath("experiment.schema.json").read_text()


def schema() -> dict[str, Any]:
    """The experiment JSON Schema, its method enum filled from `dara.methods`."""
    document = json.loads(_schema_text())
    document["$defs"]["method"] = {"enum": list(METHODS)}
    return document


def schema_defaults(definition: str) -> dict[str, Any]:
    """``default`` of every property of a ``$defs`` entry (one level; nested objects by their own entry), e.g.
    ``warm_start``, ``warm_start_model``, ``evaluation``."""
    properties = schema()["$defs"][definition]["properties"]
    return {key: copy.deepcopy(spec["default"]) for key, spec in properties.items() if "default" in spec}


def default_settings() -> dict[str, Any]:
    """Trainer settings every CPU-scale run starts from (the schema's defaults)."""
    return schema_defaults("settings")


def _location(path) -> str:
    return "/".join(str(part) for part in path) or "<top level>"


def validate_experiment(experiment: dict[str, Any], source: str = "experiment") -> dict[str, Any]:
    """Raise ``ExperimentError`` naming the offending key if ``experiment`` breaks the schema or refers to unknown
    tasks, models or targets; return it unchanged otherwise."""
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
        backend = target.get("backend", experiment.get("backend", "tiny"))
        if backend != "verl" and experiment.get("backend") == "verl" and "warm_start" not in experiment:
            raise ExperimentError(f"{source}: targets/{name}/backend: {backend} trains from the tiny warm start, "
                                  f"but this verl experiment has no warm_start block")
    for name, target in experiment["targets"].items():
        if target.get("backend", experiment.get("backend", "tiny")) == "verl" and "warm_starts" in target:
            raise ExperimentError(f"{source}: targets/{name}/warm_starts: a verl target starts from its model (or, on "
                                  "CPU, from warm start 0's verl data), not from the tiny warm starts")
    if experiment.get("backend") == "verl":
        # verl's data and policy on CPU come from warm start 0 (rule prepare_tiny_verl_data): its tiny twins too
        for where, block in [*((f"tasks/{t}", b) for t, b in experiment["tasks"].items()),
                             *((f"targets/{t}", b) for t, b in experiment["targets"].items())]:
            if block.get("warm_starts", [0]) != [0]:
                raise ExperimentError(f"{source}: {where}/warm_starts: the runs of a verl experiment start from warm "
                                      "start 0 (verl's data is prepared from it), so its tiny twins must too")
        _validate_paper(experiment, source)
    return experiment


def _validate_paper(experiment: dict[str, Any], source: str) -> None:
    paper = experiment["settings"].get("paper")
    if paper is None:
        raise ExperimentError(f"{source}: settings/paper is missing (a verl experiment needs it)")
    models = paper.get("models", {})
    for target in experiment["targets"]:
        if target_backend(experiment, target) != "verl":
            continue  # a tiny-trainer (or TRL) twin of a verl run: no model to list
        listed = paper.get("target_models", {}).get(target)
        if not listed:
            raise ExperimentError(f"{source}: settings/paper/target_models/{target}: no models listed")
        for model in listed:
            if model not in models:
                raise ExperimentError(f"{source}: settings/paper/target_models/{target}: unknown model {model!r}")
    for task in experiment["tasks"]:
        primary = paper.get("primary_models", {}).get(task)
        if primary is None:
            raise ExperimentError(f"{source}: settings/paper/primary_models/{task}: every task needs a primary model")
        if primary not in models:
            raise ExperimentError(f"{source}: settings/paper/primary_models/{task}: unknown model {primary!r}")
        _task_paper(experiment, task)  # raises on unknown or circular inherit


def _fill_defaults(experiment: dict[str, Any]) -> dict[str, Any]:
    experiment = copy.deepcopy(experiment)
    experiment.setdefault("backend", "tiny")
    shared = default_settings()
    if experiment["backend"] == "verl":
        shared = {key: value for key, value in shared.items() if key in VERL_SHARED_KEYS}
    experiment["settings"] = {**shared, **experiment["settings"]}
    experiment["evaluation"] = {**schema_defaults("evaluation"), **experiment.get("evaluation", {})}
    if experiment["backend"] != "verl" or "warm_start" in experiment:  # verl on CPU starts from tiny policies
        warm = experiment.get("warm_start", {})
        experiment["warm_start"] = {**schema_defaults("warm_start"), **warm,
                                    "model": {**schema_defaults("warm_start_model"), **warm.get("model", {})}}
    return experiment


def load_experiment(scale_or_path: str | Path) -> dict[str, Any]:
    """The validated experiment of a scale name (``experiments/<name>.yaml``) or of a yaml path, with every
    default of the schema filled in."""
    path = Path(scale_or_path)
    if path.suffix not in (".yaml", ".yml"):
        folder = experiments_dir()
        if not folder.is_dir():
            raise FileNotFoundError(
                f"scale name {str(scale_or_path)!r}: scale names are the files of a checkout's experiments/ folder "
                f"or of ${EXPERIMENTS_DIR_VARIABLE}, and there is none at {folder} (an installed package has no "
                f"checkout); pass the path of an experiment yaml, or set {EXPERIMENTS_DIR_VARIABLE}")
        path = folder / f"{scale_or_path}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no experiment file {path}")
    experiment = yaml.safe_load(path.read_text())
    if not isinstance(experiment, dict):
        raise ExperimentError(f"{path}: an experiment file must be a mapping, got {type(experiment).__name__}")
    if "replicate_of" in experiment:
        experiment = replicate_experiment(experiment, path)
    validate_experiment(experiment, str(path))
    return _fill_defaults(experiment)


# A replicate's seeds and warm starts are its study's shifted by this much per replicate number: far above any
# seed or warm start a study names, so no run or warm-start policy of the study is drawn again.
REPLICATE_OFFSET = 100
REPLICATE_KEYS = {"scale", "description", "replicate_of", "replicate"}


def replicate_experiment(stub: dict[str, Any], path: Path) -> dict[str, Any]:
    """The experiment a replicate file describes (``replicate_of: <scale>``, ``replicate: n``): the study of that
    scale's file, every run drawn again independently. Every target's seeds and every task's and target's warm starts
    move by ``n * REPLICATE_OFFSET`` (seed s from warm start k becomes seed s + shift from warm start k + shift, so each
    run keeps its place in the warm-start round and every arm of a claim still shares its warm starts); settings,
    tasks and analysis are the study's own, stated once in its file. Results go under ``results/<scale of this
    file>``."""
    unknown = sorted(set(stub) - REPLICATE_KEYS)
    if unknown:
        raise ExperimentError(f"{path}: a replicate file names only {sorted(REPLICATE_KEYS)}; it has {unknown} "
                              f"(settings belong in the study's own file)")
    number = stub.get("replicate")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ExperimentError(f"{path}: replicate must be an integer >= 1, got {number!r}")
    if not isinstance(stub.get("scale"), str) or stub["scale"] == stub["replicate_of"]:
        raise ExperimentError(f"{path}: a replicate needs a scale name of its own (its results folder), "
                              f"not {stub.get('scale')!r}")
    base_path = path.parent / f"{stub['replicate_of']}.yaml"
    if not base_path.is_file():
        raise ExperimentError(f"{path}: replicate_of {stub['replicate_of']!r}: no experiment file {base_path}")
    experiment = yaml.safe_load(base_path.read_text())
    if not isinstance(experiment, dict) or "replicate_of" in experiment:
        raise ExperimentError(f"{path}: replicate_of must name a study's own experiment file, not {base_path}")
    validate_experiment(experiment, str(base_path))
    shift = number * REPLICATE_OFFSET
    lists = [block["warm_starts"] for part in ("tasks", "targets") for block in experiment[part].values()
             if "warm_starts" in block]
    if any(shift % len(warm_starts) for warm_starts in lists):
        # seed s + shift must take the place of seed s in its warm-start round, or the arms' pairing changes
        raise ExperimentError(f"{path}: a shift of {shift} keeps each seed's place in the round of warm starts only "
                              f"when every warm_starts list's length divides it; lengths {sorted(map(len, lists))}")
    experiment = copy.deepcopy(experiment)
    experiment["scale"] = stub["scale"]
    experiment["description"] = stub.get("description", f"replicate {number} of {stub['replicate_of']}")
    for task in experiment["tasks"].values():
        task["warm_starts"] = [k + shift for k in task.get("warm_starts", [0])]
    for target in experiment["targets"].values():
        target["seeds"] = [seed + shift for seed in target["seeds"]]
        if "warm_starts" in target:
            target["warm_starts"] = [k + shift for k in target["warm_starts"]]
    return experiment


def is_paper_setting(experiment: dict[str, Any]) -> bool:
    """Whether an experiment's runs are the paper's setting (verl on GPUs) rather than a CPU stand-in: the analysis
    marks every other scale's figures and tables as not the paper's."""
    from dara.devices import verl_device

    return experiment["backend"] == "verl" and verl_device(experiment["settings"]["paper"]) != "cpu"


def target_backend(experiment: dict[str, Any], target: str) -> str:
    """The backend that trains a target's runs: the target's own ``backend``, else the experiment's."""
    return experiment["targets"][target].get("backend", experiment["backend"])


def run_settings(experiment: dict[str, Any], target: str, method: str) -> dict[str, Any]:
    """Resolved settings of a target's runs with ``method`` (global -> task -> target), as the trainers read them.

    ``static_weights`` belong to the static methods only: they must be there (one per reward) for those and are
    dropped for the other methods of the same sweep. ``task_options`` are the task's keyword arguments.
    """
    if target not in experiment["targets"]:
        raise ExperimentError(f"unknown target {target!r}; targets: {', '.join(experiment['targets'])}")
    block = experiment["targets"][target]
    task = experiment["tasks"][block["task"]]
    # a CPU trainer's target inside a verl experiment (verl_cpu) gets the CPU trainers' defaults, which a verl
    # experiment's global block leaves out
    defaults = default_settings() if target_backend(experiment, target) != "verl" else {}
    settings = {**defaults, **experiment["settings"], **task.get("settings", {}), **block.get("settings", {})}
    settings.pop("paper", None)
    if get_method(method).needs_static_weights:
        if "static_weights" not in settings:
            raise ExperimentError(f"targets/{target}: method {method!r} needs settings.static_weights "
                                  f"(in the target, its task or the global settings)")
        from dara.tasks import get_task

        rewards = get_task(block["task"], **task.get("options", {})).reward_names
        if len(settings["static_weights"]) != len(rewards):
            raise ExperimentError(f"targets/{target}: static_weights has {len(settings['static_weights'])} "
                                  f"values but task {block['task']!r} has {len(rewards)} rewards {rewards}")
    else:
        # Fixed weights belong to the static methods only; the other methods of the same sweep ignore them.
        settings.pop("static_weights", None)
    if settings.get("lr_schedule") == "constant":
        # what unset means (the schema gives no default): stated or not, a constant run has the same settings, so the
        # runs made before the setting existed keep theirs (and their workflow params)
        settings.pop("lr_schedule")
    settings["task_options"] = copy.deepcopy(task.get("options", {}))
    return settings


def _deep_merge(base: dict, update: dict) -> dict:
    """Nested mappings merge key by key; ``verl`` holds dotted Hydra keys, so later blocks override single keys."""
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value) if key != "verl" else {**out[key], **value}
        else:
            out[key] = copy.deepcopy(value)
    return out


def _task_paper(experiment: dict, task: str, seen: tuple[str, ...] = ()) -> dict:
    if task not in experiment["tasks"]:
        raise ExperimentError(f"tasks/{' -> '.join(seen)}: inherits from undefined task {task!r}")
    if task in seen:
        raise ExperimentError(f"tasks/{task}: circular inherit {' -> '.join(seen + (task,))}")
    block = experiment["tasks"][task].get("settings", {}).get("paper", {})
    parent = block.get("inherit")
    base = _task_paper(experiment, parent, seen + (task,)) if parent else {}
    return _deep_merge(base, {k: v for k, v in block.items() if k != "inherit"})


def paper_settings(experiment: dict[str, Any], target: str, model: str) -> dict[str, Any]:
    """The merged ``paper`` block of a verl run: global -> task (after ``inherit``) -> model -> target.

    Holds ``verl`` (Hydra overrides by dotted key), the task's data and reward keys, the model's ``hf_id``,
    ``resources`` and ``env``, and the study-wide ``verl_version``, ``logger``, ``wandb_project``, ``data_dir`` and
    ``device``.
    """
    paper = experiment["settings"]["paper"]
    block = experiment["targets"][target]
    merged = _deep_merge({"verl": paper.get("verl", {})}, _task_paper(experiment, block["task"]))
    merged = _deep_merge(merged, paper["models"][model])
    merged = _deep_merge(merged, block.get("settings", {}).get("paper", {}))
    merged.update({key: paper[key] for key in ("verl_version", "logger", "wandb_project", "data_dir", "device")
                   if key in paper})
    return merged


def verl_run_settings(experiment: dict[str, Any], target: str, method: str, model: str) -> dict[str, Any]:
    """Resolved settings of a verl run: ``w_max``, ``batch_norm``, ``static_weights`` and ``task_options`` from
    the shared settings, the merged ``paper`` block (`paper_settings`), and the CPU trainers' settings the
    experiment states, in verl's vocabulary (`VERL_EQUIVALENT_KEYS`)."""
    shared = run_settings(experiment, target, method)  # a verl target's: only what the experiment states
    settings = {key: shared[key] for key in shared if key in (*VERL_SHARED_KEYS, "task_options")}
    settings.update(paper_settings(experiment, target, model))
    settings.update(_translated_for_verl(shared, settings, f"targets/{target} (model {model})"))
    return settings


def _translated_for_verl(shared: dict[str, Any], paper: dict[str, Any], where: str) -> dict[str, Any]:
    """The paper-block keys (``verl`` merged) that the stated CPU-trainer settings ``shared`` become; raises where
    ``paper`` states the same fact in verl's words too."""
    verl = dict(paper.get("verl", {}))
    out: dict[str, Any] = {}
    stated = [key for key in VERL_EQUIVALENT_KEYS if key in shared]

    def put(key: str, value: Any, because: str) -> None:
        block, _, name = key.rpartition("/")
        if name in (verl if block else paper):
            raise ExperimentError(
                f"{where}: settings.{because} is also stated as {'verl key ' if block else 'paper setting '}"
                f"{name!r}; state it once (the shared setting is what the tiny trainer's twins read too)")
        if block:
            verl[name] = value
        else:
            out[name] = value

    for key in stated:
        value = shared[key]
        if key == "minibatches":
            responses = shared.get("responses_per_step", paper.get("responses_per_step"))
            if responses is None or responses % value:
                raise ExperimentError(f"{where}: settings.minibatches={value} must divide responses_per_step "
                                      f"({responses}) to give verl's mini_batch_responses")
            value = responses // value
        if key == "lr_warmup_updates" and value and shared.get("minibatches") != 1:
            # verl steps its scheduler once per training step, the CPU trainers once per update
            raise ExperimentError(f"{where}: settings.lr_warmup_updates={value} counts updates, verl's warm-up "
                                  f"counts steps; they agree only with settings.minibatches: 1")
        if key == "lr_schedule" and value != "constant" and shared.get("minibatches") != 1:
            raise ExperimentError(f"{where}: settings.lr_schedule={value} decays over updates, verl's over steps; "
                                  f"they agree only with settings.minibatches: 1")
        if key == "kl_coef":
            put(VERL_KL_KEYS[0], value > 0, key)
            put(VERL_KL_KEYS[1], "low_var_kl", key)
        put(VERL_EQUIVALENT_KEYS[key], value, key)
    if verl != paper.get("verl", {}):
        out["verl"] = verl
    return out


def checked_warm_start(value: Any, where: str = "") -> int:
    """A warm start's number (an integer >= 0, bools refused), or an error naming ``where`` it was read."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ExperimentError(f"{where}warm_start must be an integer >= 0, got {value!r}")
    return value


def warm_start_settings(experiment: dict[str, Any], task: str, warm_start: int = 0) -> dict[str, Any]:
    """Keyword arguments of ``dara.tiny.warmstart.warm_start`` for warm start number ``warm_start`` of ``task``
    (global block, then the task's). Warm start k is drawn with seed ``warm_start.seed + k``: its own corpus,
    tokenizer, initial weights and supervised batches, independent of the task's other warm starts."""
    checked_warm_start(warm_start)
    if task not in experiment["tasks"]:
        raise ExperimentError(f"task {task!r} is not defined in experiment {experiment['scale']!r}")
    if "warm_start" not in experiment:
        raise ExperimentError(f"experiment {experiment['scale']!r} (backend {experiment['backend']}) has no warm start")
    block = experiment["tasks"][task]
    own = block.get("warm_start", {})
    settings = {**experiment["warm_start"], **own,
                "model": {**experiment["warm_start"]["model"], **own.get("model", {})}}
    run_defaults = {**experiment["settings"], **block.get("settings", {})}
    settings["max_new_tokens"] = run_defaults["max_new_tokens"]
    settings["seed"] = int(settings["seed"]) + warm_start
    return {"task_name": task, "task_options": copy.deepcopy(block.get("options", {})), **settings}
