"""Paper-scale runs: from ``experiments/paper.yaml`` to the verl command of each run, and the run itself.

    python -m dara.verl_plugin.launch list [--target toolcall]          # every run folder of the study
    python -m dara.verl_plugin.launch command --run-task toolcall-qwen2.5-1.5b --method dara_sym --group-size 4 --seed 0
    python -m dara.verl_plugin.launch train   --run-task ... (same)     # run verl, then write metrics.parquet

A run is (task, model, method, G, seed); its folder is ``results/paper/runs/<task>-<model>/<method>/G<G>/seed<seed>/``
with ``config.yaml`` (the resolved settings and the exact verl overrides), ``git_revision.txt``, ``verl_logs/``
(one verl file-logger JSONL per attempt), ``verl_checkpoints/`` (verl's, resumed automatically),
``checkpoints/step<N>`` (links to the Hugging Face exports) and ``metrics.parquet`` (written last).

Settings merge deeply: ``settings.paper`` -> ``tasks.<task>.settings.paper`` (after its ``inherit``) -> the model's
entry -> ``targets.<target>.settings.paper``. The ``verl`` mappings hold Hydra overrides by dotted key; the run adds
the batch sizes for its G, paths, seed, estimator and logging (`verl_overrides`).
"""

from __future__ import annotations

import argparse
import copy
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dara.io import write_text_atomic
from dara.experiments import load_experiment
from dara.verl_plugin import TRAINER_MODE, VERL_VERSION
from dara.verl_plugin.estimators import VERL_ESTIMATOR_NAMES

REPO_ROOT = Path(__file__).resolve().parents[3]
REWARDS_MODULE = "pkg://dara.verl_plugin.rewards"
# Keys verl's config does not define: Hydra needs "+" to add them.
NEW_KEY_PREFIXES = ("algorithm.dara.", "reward.custom_reward_function.reward_kwargs.",
                    "ray_kwargs.ray_init.runtime_env.env_vars.")
# Single keys verl's config lacks (the CPU backend adds them; see dara.verl_plugin.cpu.verl_settings).
NEW_KEYS = {"ray_kwargs.ray_init.num_gpus", "actor_rollout_ref.model.override_config.attn_implementation"}
DEVICES = ("cuda", "cpu")
PAPER_KEYS = {
    "global": {"verl_version", "logger", "wandb_project", "data_dir", "models", "target_models", "primary_models",
               "verl", "device"},
    "task": {"dataset", "reward_function", "reward_kwargs", "reward_keys", "steps", "responses_per_step",
             "mini_batch_responses", "verl", "inherit", "token_count_reward_manager"},
    "model": {"hf_id", "steps", "resources", "env", "verl"},
    "target": {"verl", "steps"},
}
RESOURCE_KEYS = {"nodes", "gpus_per_node", "gpu_model", "runtime_minutes"}


class PaperConfigError(ValueError):
    """experiments/paper.yaml does not describe a runnable paper-scale study."""


@dataclass(frozen=True)
class PaperRun:
    """One paper-scale training run and its resolved settings."""

    task: str
    model: str
    method: str
    group_size: int
    seed: int
    settings: dict[str, Any] = field(compare=False, hash=False, repr=False)
    targets: tuple[str, ...] = field(default=(), compare=False)

    @property
    def run_task(self) -> str:
        """The run's task folder, ``<task>-<model>`` (also the evaluation's, `dara.evaluation.layout`)."""
        return f"{self.task}-{self.model}"

    @property
    def is_primary(self) -> bool:
        """Whether this is a run of its task's primary model, whose metrics the shared view (see paper.smk) shows."""
        return self.settings.get("primary_model") == self.model

    def run_dir(self, results: str | Path = "results/paper") -> Path:
        return Path(results) / "runs" / self.run_task / self.method / f"G{self.group_size}" / f"seed{self.seed}"

    @property
    def resources(self) -> dict[str, Any]:
        return dict(self.settings["resources"])


def _deep_merge(base: dict, update: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key != "verl":
            out[key] = _deep_merge(out[key], value)
        elif key == "verl":
            out[key] = {**out.get(key, {}), **value}  # dotted keys: later blocks override single keys
        else:
            out[key] = copy.deepcopy(value)
    return out


def _check_keys(block: dict, allowed: set[str], where: str) -> None:
    if not isinstance(block, dict):
        raise PaperConfigError(f"{where} must be a mapping, got {type(block).__name__}")
    unknown = sorted(set(block) - allowed)
    if unknown:
        raise PaperConfigError(f"{where}: unknown keys {unknown}; allowed: {sorted(allowed)}")


def _task_paper(experiment: dict, task: str, seen: tuple[str, ...] = ()) -> dict:
    if task not in experiment["tasks"]:
        raise PaperConfigError(f"tasks/{task}: not defined")
    if task in seen:
        raise PaperConfigError(f"tasks/{task}: circular inherit {' -> '.join(seen + (task,))}")
    block = experiment["tasks"][task].get("settings", {}).get("paper", {})
    _check_keys(block, PAPER_KEYS["task"], f"tasks/{task}/settings/paper")
    parent = block.get("inherit")
    base = _task_paper(experiment, parent, seen + (task,)) if parent else {}
    return _deep_merge(base, {k: v for k, v in block.items() if k != "inherit"})


def load_paper_experiment(path: str | Path | None = None) -> dict[str, Any]:
    """The paper experiment, validated by the shared schema and by the paper-specific checks here."""
    experiment = load_experiment(path or "paper")
    if experiment.get("backend") != "verl":
        raise PaperConfigError(f"the paper experiment must set backend: verl, got {experiment.get('backend')!r}")
    paper = experiment["settings"].get("paper")
    if paper is None:
        raise PaperConfigError("settings/paper is missing")
    _check_keys(paper, PAPER_KEYS["global"], "settings/paper")
    if str(paper.get("verl_version")) != VERL_VERSION:
        raise PaperConfigError(
            f"settings/paper/verl_version is {paper.get('verl_version')!r}; this plugin is written for verl {VERL_VERSION}"
        )
    if paper.get("device", "cuda") not in DEVICES:
        raise PaperConfigError(f"settings/paper/device is {paper['device']!r}; valid devices: {', '.join(DEVICES)}")
    for name, model in paper.get("models", {}).items():
        _check_keys(model, PAPER_KEYS["model"], f"settings/paper/models/{name}")
        for required in ("hf_id", "resources"):
            if required not in model:
                raise PaperConfigError(f"settings/paper/models/{name}: {required} is required")
        _check_keys(model["resources"], RESOURCE_KEYS, f"settings/paper/models/{name}/resources")
        missing = RESOURCE_KEYS - set(model["resources"])
        if missing:
            raise PaperConfigError(f"settings/paper/models/{name}/resources: missing {sorted(missing)}")
    for target in experiment["targets"]:
        models = paper.get("target_models", {}).get(target)
        if not models:
            raise PaperConfigError(f"settings/paper/target_models/{target}: no models listed for target {target!r}")
        for model in models:
            if model not in paper.get("models", {}):
                raise PaperConfigError(f"settings/paper/target_models/{target}: unknown model {model!r}")
        _check_keys(experiment["targets"][target].get("settings", {}).get("paper", {}), PAPER_KEYS["target"],
                    f"targets/{target}/settings/paper")
    for task in experiment["tasks"]:
        primary = paper.get("primary_models", {}).get(task)
        if primary is None:
            raise PaperConfigError(f"settings/paper/primary_models/{task}: every task needs its primary model")
        if primary not in paper.get("models", {}):
            raise PaperConfigError(f"settings/paper/primary_models/{task}: unknown model {primary!r}")
    return experiment


def paper_runs(experiment: dict[str, Any], target: str | None = None) -> list[PaperRun]:
    """Every distinct run of one target or of all targets (a run shared by targets appears once)."""
    paper = experiment["settings"]["paper"]
    names = list(experiment["targets"]) if target is None else [target]
    runs: dict[tuple, PaperRun] = {}
    for name in names:
        if name not in experiment["targets"]:
            raise PaperConfigError(f"unknown target {name!r}; targets: {', '.join(experiment['targets'])}")
        block = experiment["targets"][name]
        shared = {k: v for k, v in experiment["settings"].items() if k != "paper"}
        shared.update({k: v for k, v in experiment["tasks"][block["task"]].get("settings", {}).items() if k != "paper"})
        shared.update({k: v for k, v in block.get("settings", {}).items() if k != "paper"})
        for model in paper["target_models"][name]:
            model_block = {k: v for k, v in paper["models"][model].items()}
            settings = _deep_merge({"verl": paper.get("verl", {})}, _task_paper(experiment, block["task"]))
            settings = _deep_merge(settings, model_block)
            settings = _deep_merge(settings, block.get("settings", {}).get("paper", {}))
            settings.update({k: paper[k] for k in ("logger", "wandb_project", "data_dir", "device") if k in paper})
            settings["shared"] = shared
            settings["primary_model"] = paper.get("primary_models", {}).get(block["task"])
            for method in block["methods"]:
                for group_size in block["group_sizes"]:
                    for seed in block["seeds"]:
                        run = PaperRun(block["task"], model, method, int(group_size), int(seed),
                                       settings=copy.deepcopy(settings), targets=(name,))
                        key = (run.task, run.model, run.method, run.group_size, run.seed)
                        if key in runs:
                            if runs[key].settings != run.settings:
                                raise PaperConfigError(f"run {run.run_dir()} is in targets {runs[key].targets} and "
                                                       f"{name!r} with different settings")
                            runs[key] = PaperRun(*key, settings=runs[key].settings,
                                                 targets=runs[key].targets + (name,))
                        else:
                            runs[key] = run
    return list(runs.values())


def find_run(experiment: dict[str, Any], run_task: str, method: str, group_size: int, seed: int) -> PaperRun:
    for run in paper_runs(experiment):
        if (run.run_task, run.method, run.group_size, run.seed) == (run_task, method, int(group_size), int(seed)):
            return run
    raise PaperConfigError(f"no paper run {run_task}/{method}/G{group_size}/seed{seed} in any target")


def _per_group(total: int, group_size: int, what: str) -> int:
    if total % group_size:
        raise PaperConfigError(f"{what}={total} responses is not a multiple of G={group_size}")
    return total // group_size


def verl_overrides(run: PaperRun, run_dir: str | Path, data_dir: str | Path | None = None,
                   env: dict[str, str] | None = None) -> dict[str, Any]:
    """The verl config values of one run, by dotted key (`hydra_overrides` renders them).

    Paths are made absolute (Ray workers do not share the launcher's working directory). ``env`` goes into Ray's
    runtime environment, so every verl process sees it, also on a cluster that was started before this run.
    """
    s = run.settings
    for required in ("dataset", "reward_function", "reward_keys", "steps", "responses_per_step",
                     "mini_batch_responses", "hf_id", "resources"):
        if required not in s:
            raise PaperConfigError(f"run {run.run_task}/{run.method}: paper setting {required!r} is missing")
    data = (Path(data_dir or s["data_dir"]) / s["dataset"]).absolute()
    run_dir = Path(run_dir).absolute()
    resources = s["resources"]
    logger = list(s.get("logger", ["console", "file"]))
    if "file" not in logger:
        raise PaperConfigError("settings/paper/logger must include 'file' (metrics.parquet is made from it)")
    if s.get("wandb_project") and "wandb" not in logger:
        logger.append("wandb")
    values: dict[str, Any] = dict(s.get("verl", {}))
    values.update({
        "algorithm.adv_estimator": VERL_ESTIMATOR_NAMES[run.method],
        "algorithm.norm_adv_by_std_in_grpo": True,
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": TRAINER_MODE,
        "algorithm.dara.reward_keys": list(s["reward_keys"]),
        "algorithm.dara.w_max": float(s["shared"].get("w_max", 5.0)),
        "algorithm.dara.batch_norm": s["shared"].get("batch_norm", "token"),
        "data.train_files": str(data / "train.parquet"),
        "data.val_files": str(data / "test.parquet"),
        "data.train_batch_size": _per_group(s["responses_per_step"], run.group_size, "responses_per_step"),
        "actor_rollout_ref.actor.ppo_mini_batch_size": _per_group(s["mini_batch_responses"], run.group_size,
                                                                  "mini_batch_responses"),
        "actor_rollout_ref.rollout.n": run.group_size,
        "data.seed": run.seed,
        "actor_rollout_ref.actor.data_loader_seed": run.seed,
        "actor_rollout_ref.model.path": _model_path(s["hf_id"]),
        "trainer.total_training_steps": int(s["steps"]),
        "trainer.nnodes": int(resources["nodes"]),
        "trainer.n_gpus_per_node": int(resources["gpus_per_node"]),
        "trainer.logger": logger,
        "trainer.project_name": s.get("wandb_project") or "dara-paper",
        "trainer.experiment_name": f"{run.run_task}-{run.method}-G{run.group_size}-seed{run.seed}",
        "trainer.default_local_dir": str(run_dir / "verl_checkpoints"),
        "trainer.resume_mode": "auto",
        "reward.custom_reward_function.path": REWARDS_MODULE,
        "reward.custom_reward_function.name": s["reward_function"],
    })
    values.setdefault("actor_rollout_ref.rollout.seed", run.seed)
    if s.get("device", "cuda") == "cpu":
        values.update(_cpu_values(run, values, env))
    if run.method in ("static_sym", "static_asym"):
        if "static_weights" not in s["shared"]:
            raise PaperConfigError(f"{run.method} needs settings.static_weights in its target")
        values["algorithm.dara.static_weights"] = [float(w) for w in s["shared"]["static_weights"]]
    for name, value in (env or {}).items():
        values[f"ray_kwargs.ray_init.runtime_env.env_vars.{name}"] = str(value)
    for key, value in s.get("reward_kwargs", {}).items():
        values[f"reward.custom_reward_function.reward_kwargs.{key}"] = value
    if s.get("token_count_reward_manager"):
        values.update({
            "reward.reward_manager.source": "importlib",
            "reward.reward_manager.module.path": REWARDS_MODULE,
            "reward.reward_manager.name": "TokenCountRewardManager",
        })
    return values


def _cpu_values(run: PaperRun, values: dict[str, Any], env: dict[str, str] | None) -> dict[str, Any]:
    """The overrides of ``device: cpu`` (`dara.verl_plugin.cpu`), refusing settings that contradict them."""
    from dara.verl_plugin.cpu import CPU_OVERRIDES, worker_environment

    resources = run.settings["resources"]
    if int(resources["nodes"]) != 1 or int(resources["gpus_per_node"]) != 1:
        raise PaperConfigError(
            f"run {run.run_task}/{run.method}: device cpu runs one training process (world size 1); set resources "
            f"nodes: 1 and gpus_per_node: 1, got {resources['nodes']} and {resources['gpus_per_node']}"
        )
    conflicts = sorted(key for key in CPU_OVERRIDES if key in run.settings.get("verl", {})
                       and run.settings["verl"][key] != CPU_OVERRIDES[key])
    if conflicts:
        raise PaperConfigError(
            f"run {run.run_task}/{run.method}: device cpu sets {conflicts} itself; remove them from the verl settings "
            f"(they are {[run.settings['verl'][k] for k in conflicts]}, the CPU backend needs "
            f"{[CPU_OVERRIDES[k] for k in conflicts]})"
        )
    out = dict(CPU_OVERRIDES)
    for name, value in worker_environment(env or {}).items():
        out[f"ray_kwargs.ray_init.runtime_env.env_vars.{name}"] = value
    return out


def _model_path(hf_id: str) -> str:
    """A local model folder made absolute (Ray workers do not share the launcher's working directory); a hub id
    as it is."""
    return str(Path(hf_id).absolute()) if Path(hf_id).is_dir() else hf_id


def _render(value: Any) -> str:
    """A Hydra override value. Every string is quoted: unquoted, Hydra would read "1" as an int and "true" as a
    bool, and Ray refuses non-string environment variables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_render(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise PaperConfigError(f"cannot render {value!r} ({type(value).__name__}) as a Hydra override value")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_overrides(values: dict[str, Any]) -> list[str]:
    """Hydra command-line overrides; keys verl's config lacks get "+"."""
    return [("+" if key.startswith(NEW_KEY_PREFIXES) or key in NEW_KEYS else "") + f"{key}={_render(value)}"
            for key, value in values.items()]


def verl_command(run: PaperRun, run_dir: str | Path, data_dir: str | Path | None = None,
                 env: dict[str, str] | None = None) -> list[str]:
    values = verl_overrides(run, run_dir, data_dir, env)
    return [sys.executable, "-m", "dara.verl_plugin.main", *hydra_overrides(values)]


def run_environment(run: PaperRun, attempt_log: str | Path) -> dict[str, str]:
    """Environment of a run's verl processes: the model's variables and the file logger's path."""
    env = {str(k): str(v) for k, v in run.settings.get("env", {}).items()}
    env["VERL_FILE_LOGGER_PATH"] = str(Path(attempt_log).absolute())
    if run.settings.get("device", "cuda") == "cpu":
        from dara.verl_plugin.cpu import worker_environment

        env = worker_environment(env)
    return env


def _git_revision() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
        return rev.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def link_hf_checkpoints(run_dir: Path) -> list[Path]:
    """``checkpoints/step<N>`` -> verl's ``verl_checkpoints/global_step_<N>/actor/huggingface`` (relative links)."""
    links = []
    for export in sorted((run_dir / "verl_checkpoints").glob("global_step_*/actor/huggingface")):
        step = int(export.parent.parent.name.removeprefix("global_step_"))
        link = run_dir / "checkpoints" / f"step{step}"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            os.symlink(os.path.relpath(export, link.parent), link)
        links.append(link)
    return links


def train(run: PaperRun, results: str | Path = "results/paper", data_dir: str | Path | None = None) -> Path:
    """Run verl for one run (resuming from its checkpoints) and write its metrics.parquet; returns that path."""
    from dara.verl_plugin.logs import convert_run_logs

    run_dir = run.run_dir(results)
    log_dir = run_dir / "verl_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    attempt = 1 + max((int(p.stem.removeprefix("attempt")) for p in log_dir.glob("attempt*.jsonl")), default=0)
    attempt_log = log_dir / f"attempt{attempt}.jsonl"
    run_env = run_environment(run, attempt_log)
    values = verl_overrides(run, run_dir, data_dir, run_env)
    command = [sys.executable, "-m", "dara.verl_plugin.main", *hydra_overrides(values)]
    config = {"run": {"task": run.task, "model": run.model, "method": run.method, "group_size": run.group_size,
                      "seed": run.seed, "targets": list(run.targets)},
              "settings": run.settings, "verl_overrides": values, "command": shlex.join(command)}
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    write_text_atomic(run_dir / "git_revision.txt", _git_revision() + "\n")
    env = {**os.environ, **run_env}
    subprocess.run(command, env=env, check=True, cwd=REPO_ROOT)
    link_hf_checkpoints(run_dir)
    out = run_dir / "metrics.parquet"
    convert_run_logs(log_dir, run.settings["reward_keys"], out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["list", "command", "train"])
    parser.add_argument("--experiment", default=None, help="paper experiment yaml (default experiments/paper.yaml)")
    parser.add_argument("--target", default=None)
    parser.add_argument("--run-task")
    parser.add_argument("--method")
    parser.add_argument("--group-size", type=int)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--results", default="results/paper")
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    experiment = load_paper_experiment(args.experiment)
    if args.action == "list":
        for run in paper_runs(experiment, args.target):
            print(run.run_dir(args.results))
        return
    if None in (args.run_task, args.method, args.group_size, args.seed):
        parser.error(f"{args.action} needs --run-task, --method, --group-size and --seed")
    run = find_run(experiment, args.run_task, args.method, args.group_size, args.seed)
    if args.action == "command":
        run_dir = run.run_dir(args.results)
        env = run_environment(run, run_dir / "verl_logs" / "attempt1.jsonl")
        print(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()),
              shlex.join(verl_command(run, run_dir, args.data_dir, env)))
        return
    print(train(run, args.results, args.data_dir))


if __name__ == "__main__":
    main()
