"""verl runs: from a `dara.runs.Run` of a verl experiment to verl's command line, and the run itself.

    python -m dara.verl_backend.launch list    [--experiment paper] [--target toolcall]   # every run folder
    python -m dara.verl_backend.launch command --run-dir results/paper/runs/toolcall-qwen2.5-1.5b/dara_sym/G4/seed0
    python -m dara.verl_backend.launch train   --run-dir ...       # run verl, then write metrics.parquet

A run's folder (`dara.runs`) holds ``config.yaml`` (the run, the resolved settings and the exact verl overrides),
``git_revision.txt``, ``verl_logs/`` (one verl file-logger JSONL per attempt), ``verl_checkpoints/`` (verl's,
resumed automatically), ``checkpoints/step<N>`` (links to the Hugging Face exports) and ``metrics.parquet``
(written last; its rows numbered as every backend's, `dara.verl_backend.logs`). The run's settings come merged from the experiment file (`dara.experiments.paper_settings`); this
module adds the batch sizes for its G, paths, seed, estimator and logging (`verl_overrides`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from dara.devices import verl_device
from dara.experiments import load_experiment
from dara.methods import get_method
from dara.provenance import write_run_provenance
from dara.runs import Run, find_run_by_dir, run_matrix
from dara.verl_plugin import TRAINER_MODE, VERL_VERSION

REPO_ROOT = Path(__file__).resolve().parents[3]
REWARDS_MODULE = "pkg://dara.verl_plugin.rewards"
# Keys verl's config does not define: Hydra needs "+" to add them.
NEW_KEY_PREFIXES = ("algorithm.dara.", "reward.custom_reward_function.reward_kwargs.",
                    "ray_kwargs.ray_init.runtime_env.env_vars.")
# Single keys verl's config lacks (the CPU backend adds them; see dara.verl_plugin.cpu).
NEW_KEYS = {"ray_kwargs.ray_init.num_gpus", "actor_rollout_ref.model.override_config.attn_implementation",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision", "actor_rollout_ref.ref.fsdp_config.mixed_precision"}


class LaunchError(ValueError):
    """A verl run that cannot be launched as its settings say."""


def check_verl_version(wanted: str) -> None:
    """A verl experiment (its ``settings.paper.verl_version``) must name the verl release the plugin is written
    for."""
    wanted = str(wanted)
    if wanted != VERL_VERSION:
        raise LaunchError(f"settings/paper/verl_version is {wanted!r}; this plugin is written for verl {VERL_VERSION}")


def _per_group(total: int, group_size: int, what: str) -> int:
    if total % group_size:
        raise LaunchError(f"{what}={total} responses is not a multiple of G={group_size}")
    return total // group_size


def verl_overrides(run: Run, run_dir: str | Path, data_dir: str | Path | None = None,
                   env: dict[str, str] | None = None) -> dict[str, Any]:
    """The verl config values of one run, by dotted key (`hydra_overrides` renders them).

    Paths are made absolute (Ray workers do not share the launcher's working directory). ``env`` goes into Ray's
    runtime environment, so every verl process sees it, also on a cluster that was started before this run.
    """
    s = run.settings
    for required in ("dataset", "reward_function", "reward_keys", "steps", "responses_per_step",
                     "mini_batch_responses", "hf_id", "resources"):
        if required not in s:
            raise LaunchError(f"run {run.name}: paper setting {required!r} is missing")
    data = (Path(data_dir or s["data_dir"]) / s["dataset"]).absolute()
    run_dir = Path(run_dir).absolute()
    resources = s["resources"]
    logger = list(s.get("logger", ["console", "file"]))
    if "file" not in logger:
        raise LaunchError("settings/paper/logger must include 'file' (metrics.parquet is made from it)")
    if s.get("wandb_project") and "wandb" not in logger:
        logger.append("wandb")
    values: dict[str, Any] = dict(s.get("verl", {}))
    values.update({
        "algorithm.adv_estimator": get_method(run.method).verl_name,
        "algorithm.norm_adv_by_std_in_grpo": True,
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": TRAINER_MODE,
        "algorithm.dara.reward_keys": list(s["reward_keys"]),
        "algorithm.dara.w_max": float(s["w_max"]),
        "algorithm.dara.batch_norm": s["batch_norm"],
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
        "trainer.experiment_name": run.name,
        "trainer.default_local_dir": str(run_dir / "verl_checkpoints"),
        "trainer.resume_mode": "auto",
        "reward.custom_reward_function.path": REWARDS_MODULE,
        "reward.custom_reward_function.name": s["reward_function"],
    })
    values.setdefault("actor_rollout_ref.rollout.seed", run.seed)
    if verl_device(s) == "cpu":
        values.update(_cpu_values(run, env))
    elif uses_gpu_hf_rollout(s):
        values.update(_gpu_hf_values(run, env))
    if get_method(run.method).needs_static_weights:
        values["algorithm.dara.static_weights"] = [float(w) for w in s["static_weights"]]
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


def uses_gpu_hf_rollout(settings: dict[str, Any]) -> bool:
    """Whether a run's paper settings put verl on a GPU with the hf rollout instead of vLLM (``device: cuda`` and
    ``actor_rollout_ref.rollout.name: hf`` in its verl settings; the GPU check, docs/gpu_check.md)."""
    from dara.verl_plugin.cpu import ROLLOUT_NAME

    return (verl_device(settings) == "cuda"
            and settings.get("verl", {}).get("actor_rollout_ref.rollout.name") == ROLLOUT_NAME)


def _cpu_values(run: Run, env: dict[str, str] | None) -> dict[str, Any]:
    """The overrides of ``device: cpu`` (`dara.verl_plugin.cpu`), refusing settings that contradict them."""
    from dara.verl_plugin.cpu import CPU_OVERRIDES

    return _hf_backend_values(run, env, CPU_OVERRIDES, "cpu", "device cpu", "the CPU backend")


def _gpu_hf_values(run: Run, env: dict[str, str] | None) -> dict[str, Any]:
    """The overrides of verl on one GPU with the hf rollout (`dara.verl_plugin.cpu.GPU_HF_OVERRIDES`), refusing
    settings that contradict them."""
    from dara.verl_plugin.cpu import GPU_HF_OVERRIDES

    return _hf_backend_values(run, env, GPU_HF_OVERRIDES, "cuda", "the hf rollout on a GPU", "the hf rollout")


def _hf_backend_values(run: Run, env: dict[str, str] | None, overrides: dict[str, Any], device: str, what: str,
                       who: str) -> dict[str, Any]:
    """``overrides`` and the worker environment of the hf rollout's one-process set-up on ``device``."""
    from dara.verl_plugin.cpu import worker_environment

    resources = run.settings["resources"]
    if int(resources["nodes"]) != 1 or int(resources["gpus_per_node"]) != 1:
        raise LaunchError(
            f"run {run.name}: {what} runs one training process (world size 1); set resources "
            f"nodes: 1 and gpus_per_node: 1, got {resources['nodes']} and {resources['gpus_per_node']}"
        )
    conflicts = sorted(key for key in overrides if key in run.settings.get("verl", {})
                       and run.settings["verl"][key] != overrides[key])
    if conflicts:
        raise LaunchError(
            f"run {run.name}: {what} sets {conflicts} itself; remove them from the verl settings "
            f"(they are {[run.settings['verl'][k] for k in conflicts]}, {who} needs "
            f"{[overrides[k] for k in conflicts]})"
        )
    out = dict(overrides)
    if os.environ.get("RAY_ADDRESS"):
        # verl joins a running Ray cluster (profiles/slurm/ray_job.sh over several nodes), and ray.init() refuses
        # resource counts then: the cluster's nodes declare them (ray start --num-cpus/--num-gpus)
        out.pop("ray_kwargs.ray_init.num_gpus", None)
        out["ray_kwargs.ray_init.num_cpus"] = None
    for name, value in worker_environment(env or {}, device).items():
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
    if isinstance(value, dict):
        return "{" + ",".join(f"{key}:{_render(item)}" for key, item in value.items()) + "}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise LaunchError(f"cannot render {value!r} ({type(value).__name__}) as a Hydra override value")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_overrides(values: dict[str, Any]) -> list[str]:
    """Hydra command-line overrides; keys verl's config lacks get "+"."""
    return [("+" if key.startswith(NEW_KEY_PREFIXES) or key in NEW_KEYS else "") + f"{key}={_render(value)}"
            for key, value in values.items()]


def verl_command(run: Run, run_dir: str | Path, data_dir: str | Path | None = None,
                 env: dict[str, str] | None = None) -> list[str]:
    values = verl_overrides(run, run_dir, data_dir, env)
    return [sys.executable, "-m", "dara.verl_plugin.main", *hydra_overrides(values)]


def run_environment(run: Run, attempt_log: str | Path) -> dict[str, str]:
    """Environment of a run's verl processes: the model's variables and the file logger's path."""
    env = {str(k): str(v) for k, v in run.settings.get("env", {}).items()}
    env["VERL_FILE_LOGGER_PATH"] = str(Path(attempt_log).absolute())
    device = verl_device(run.settings)
    if device == "cpu" or uses_gpu_hf_rollout(run.settings):
        from dara.verl_plugin.cpu import worker_environment

        env = worker_environment(env, device)
    return env


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


def train(run: Run, base: str | Path = REPO_ROOT, data_dir: str | Path | None = None) -> Path:
    """Run verl for one run (resuming from its checkpoints) and write its metrics.parquet; returns that path.
    The run's folder is ``run.run_dir`` under ``base`` (the repository root)."""
    from dara.verl_backend.logs import convert_run_logs

    run_dir = Path(base) / run.run_dir
    log_dir = run_dir / "verl_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    attempt = 1 + max((int(p.stem.removeprefix("attempt")) for p in log_dir.glob("attempt*.jsonl")), default=0)
    attempt_log = log_dir / f"attempt{attempt}.jsonl"
    run_env = run_environment(run, attempt_log)
    values = verl_overrides(run, run_dir, data_dir, run_env)
    command = [sys.executable, "-m", "dara.verl_plugin.main", *hydra_overrides(values)]
    # the run's identity by Run's field names: what the analysis reads (dara.runs.read_run_record)
    config = {"run": {"task": run.task, "model": run.model, "method": run.method, "group_size": run.group_size,
                      "seed": run.seed, "warm_start": run.warm_start},
              "settings": run.settings, "verl_overrides": values, "command": shlex.join(command)}
    write_run_provenance(run_dir, config)
    env = {**os.environ, **run_env}
    # verl's Hydra writes its outputs/ folder into the working directory: the run's folder keeps it
    subprocess.run(command, env=env, check=True, cwd=run_dir)
    link_hf_checkpoints(run_dir)
    out = run_dir / "metrics.parquet"
    convert_run_logs(log_dir, run.settings["reward_keys"], out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["list", "command", "train"])
    parser.add_argument("--experiment", default=None, help="scale name or experiment yaml (list: default paper; "
                                                           "with --run-dir: the experiment the folder belongs to)")
    parser.add_argument("--target", default=None, help="list: only this target's runs")
    parser.add_argument("--run", default=None, metavar="JSON",
                        help="command / train: the resolved run (dara.runs.Run.to_json), as the workflow passes it")
    parser.add_argument("--run-dir", help="command / train: the run's folder (dara.runs layout), relative to the "
                                          "working directory (the repository root in the workflow)")
    parser.add_argument("--data-dir", default=None, help="prepared datasets (default: settings.paper.data_dir)")
    args = parser.parse_args(argv)
    if args.action == "list" or args.run_dir:
        experiment = load_experiment(args.experiment or "paper")
        if experiment["backend"] != "verl":
            parser.error(f"experiment {args.experiment!r} is not a verl experiment (backend "
                         f"{experiment['backend']!r})")
        check_verl_version(experiment["settings"]["paper"]["verl_version"])
    if args.action == "list":
        for run in run_matrix(experiment, args.target):
            print(run.run_dir)
        return
    if (args.run is None) == (args.run_dir is None):
        parser.error(f"{args.action} needs exactly one of --run (a resolved run) and --run-dir (a folder of "
                     f"--experiment, paper by default)")
    if args.run is not None:
        try:
            run = Run.from_json(args.run)
        except ValueError as error:
            parser.error(str(error))
        if run.backend != "verl":
            parser.error(f"{run.run_dir} is a run of the {run.backend!r} backend, not verl's")
        check_verl_version(run.settings["verl_version"])
    else:
        run = find_run_by_dir(experiment, args.run_dir)
    if args.action == "command":
        run_dir = Path.cwd() / run.run_dir
        env = run_environment(run, run_dir / "verl_logs" / "attempt1.jsonl")
        print(" ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()),
              shlex.join(verl_command(run, run_dir, args.data_dir, env)))
        return
    print(train(run, base=Path.cwd(), data_dir=args.data_dir))


if __name__ == "__main__":
    main()
