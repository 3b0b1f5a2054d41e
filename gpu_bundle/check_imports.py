"""Check that the GPU bundle, on PYTHONPATH ahead of the image's packages, gives the paper path every module it
imports, at the bundle's versions (docs/gpu_bundle.md).

    python gpu_bundle/check_imports.py --site build/gpu-site          # gpu_bundle/activate.sh runs this
    python gpu_bundle/check_imports.py --site build/gpu-site --ray    # also start and stop a local Ray

Imports `MODULES` (the modules that dara's verl path, its hf rollout, dara.trl and the experiment files start from;
their imports pull the rest), checks that every package pinned in envs/gpu-bundle.txt comes from ``--site`` at its
pinned version (so transformers is verl's pin, not the image's), that dara's verl plugin registers, and with
``--ray`` that a local Ray starts, runs a task that imports verl's trainer in a worker, and stops. Exits 1 naming
each problem.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _build_script():
    """gpu_bundle/build.py, beside this file (loaded by path: a module named ``build`` may be another package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dara_gpu_bundle_build", Path(__file__).with_name("build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# What a verl run with the hf rollout, dara.trl and the tiny trainer start from, in the driver and in Ray's workers.
MODULES = (
    # verl's trainer, its V1 sync trainer, the FSDP engine workers, the agent and reward loops, the data path
    "verl.trainer.main_ppo",
    "verl.trainer.ppo.ray_trainer",
    "verl.trainer.ppo.v1.trainer_sync",
    "verl.trainer.ppo.v1.replay_buffer",
    "verl.workers.engine_workers",
    "verl.workers.rollout.replica",
    "verl.experimental.agent_loop",
    "verl.experimental.reward_loop",
    "verl.experimental.reward_loop.reward_manager.naive",
    "verl.utils.dataset.rl_dataset",
    "verl.single_controller.ray",
    "verl.utils.tracking",
    "transfer_queue",
    "ray.util.placement_group",
    "ray.util.scheduling_strategies",
    "ray.util.state",
    "ray.experimental.state.api",
    "tensordict",
    "torchdata.stateful_dataloader",
    "hydra",
    "omegaconf",
    "peft",
    "codetiming",
    # dara: the verl plugin and its hf rollout backend, the launcher, TRL, the tiny trainer, the experiment files
    "dara.verl_plugin",
    "dara.verl_plugin.trainer",
    "dara.verl_plugin.main",
    "dara.verl_plugin.cpu_backend",
    "dara.verl_plugin.cpu_backend.hf_rollout",
    "dara.verl_backend.launch",
    "dara.verl_backend.tiny_data",
    "dara.verl_backend.logs",
    "dara.trl.train",
    "dara.tiny.trainer",
    "dara.tiny.warmstart",
    "dara.experiments",
    "trl",
    "datasets",
    "jsonschema",
    "yaml",
)


def import_problems(modules=MODULES) -> list[str]:
    problems = []
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException as error:  # noqa: BLE001 (a SystemExit from an import is a problem to report too)
            where = traceback.extract_tb(error.__traceback__)[-1]
            problems.append(f"import {module}: {type(error).__name__}: {error} ({where.filename}:{where.lineno}); "
                            "a module missing here is in neither the image nor the bundle: add its distribution "
                            "to envs/gpu-bundle.txt")
    return problems


def version_problems(site: Path, pins: dict[str, str]) -> list[str]:
    problems = []
    site = site.resolve()
    for name, version in pins.items():
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{name}: no distribution record found")
            continue
        location = Path(dist.locate_file("")).resolve()
        if location != site:
            problems.append(f"{name} {dist.version} comes from {location}, not the bundle's {site} (PYTHONPATH "
                            "must name the bundle ahead of the image's packages)")
        elif dist.version != version:
            problems.append(f"{name}: {dist.version} in the bundle, envs/gpu-bundle.txt pins {version}")
    return problems


def ray_round_trip(site: Path) -> tuple[dict, list[str]]:
    """Start a local Ray (1 CPU, no dashboard), import verl's trainer and dara's plugin in a worker, stop Ray."""
    import ray

    started = time.perf_counter()
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        @ray.remote
        def worker_imports():
            import transformers
            import verl.trainer.main_ppo  # noqa: F401
            import dara.verl_plugin as plugin

            plugin.assert_registered()
            return {"ray": ray.__file__, "transformers": transformers.__version__}

        seen = ray.get(worker_imports.remote(), timeout=300)
    finally:
        ray.shutdown()
    seen["ray_seconds"] = round(time.perf_counter() - started, 1)
    problems = []
    if not Path(seen["ray"]).resolve().is_relative_to(site.resolve()):
        problems.append(f"a Ray worker imported ray from {seen['ray']}, not from the bundle {site}")
    return seen, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, required=True, help="the bundle's unpacked site-packages folder")
    parser.add_argument("--requirements", type=Path, default=ROOT / "envs" / "gpu-bundle.txt")
    parser.add_argument("--ray", action="store_true", help="also start a local Ray and import in a worker")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    problems = import_problems()
    problems += version_problems(args.site, _build_script().read_requirements(args.requirements))
    if not problems:
        try:
            import dara.verl_plugin as plugin

            plugin.assert_registered()
        except Exception as error:  # reported, not raised: the summary names every problem
            problems.append(f"dara's verl plugin: {error}")
    summary = {"python": sys.version.split()[0], "import_seconds": round(time.perf_counter() - started, 1)}
    if args.ray and not problems:
        seen, ray_problems = ray_round_trip(args.site)
        summary.update(seen)
        problems += ray_problems
    import torch
    import transformers

    summary.update(torch=torch.__version__, transformers=transformers.__version__, problems=problems)
    print(json.dumps(summary))
    for problem in problems:
        print("gpu bundle:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
