"""verl on CPU: the settings a run needs (this module imports no verl; the backend is `dara.verl_plugin.cpu_backend`).

A paper experiment selects it with ``device: cpu`` in ``settings.paper``; the launcher
(`dara.verl_backend.launch.verl_overrides`) then adds `CPU_OVERRIDES` and passes `worker_environment` to every verl
process, the driver and the Ray workers alike. Written for verl 0.9.1 only (`dara.verl_plugin.VERL_VERSION`).

What it covers: one training process (world size 1) with FSDP2 on CPU, a reference policy, KL in the loss or in
the reward, checkpoints and their Hugging Face export, and a transformers model as the rollout engine. What it does
not: vLLM or SGLang, several processes or nodes, throughput. It exists to run verl's real training loop (the V1
trainer, TransferQueue, the agent loop, the reward loop, weight sync, checkpointing) with a tiny model on a laptop.
See docs/paper_scale.md, "verl on CPU".

The same ``hf`` rollout also serves verl on one GPU where vLLM is not installed (the GPU check, docs/gpu_check.md):
a run whose verl settings name ``actor_rollout_ref.rollout.name: hf`` with ``device: cuda`` gets `GPU_HF_OVERRIDES`
and ``worker_environment(..., device="cuda")``: verl's own NVIDIA platform, FSDP2 with verl's default mixed
precision (bf16 parameters, fp32 reduction), the served model on the GPU in the rollout's dtype.
"""

from __future__ import annotations

import os
from pathlib import Path

import dara
from dara.devices import check_device

# The module verl imports in every process (``VERL_USE_EXTERNAL_MODULES``): it installs the CPU backend.
BACKEND_MODULE = "dara.verl_plugin.cpu_backend"
ROLLOUT_NAME = "hf"  # the rollout backend the backend registers (a transformers model served from a Ray actor)

# verl config values of a CPU run. Each is required: the run stops without it, or falls back to a GPU path.
_FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
CPU_OVERRIDES = {
    "trainer.device": "cpu",
    # FSDP's default bf16 autocast would make the actor's log-probs differ from the fp32 rollout's by ~1e-3 on CPU;
    # in fp32 both agree to float noise, so training/rollout_probs_diff_* measures weight staleness only.
    "actor_rollout_ref.actor.fsdp_config.mixed_precision": _FP32,
    "actor_rollout_ref.ref.fsdp_config.mixed_precision": _FP32,
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 1,             # one training process; Ray is told it has one (logical) GPU for it
    "ray_kwargs.ray_init.num_gpus": 1,        # verl's resource pool always asks Ray for GPUs
    "ray_kwargs.ray_init.num_cpus": 16,       # logical CPUs: every verl actor reserves one, whatever the cores
    "actor_rollout_ref.actor.strategy": "fsdp2",
    "actor_rollout_ref.ref.strategy": "fsdp2",
    "actor_rollout_ref.rollout.name": ROLLOUT_NAME,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,  # one rollout process per replica
    "actor_rollout_ref.rollout.calculate_log_probs": True,  # logs how far rollout and actor log-probs differ
    "actor_rollout_ref.rollout.agent.num_workers": 1,
    "actor_rollout_ref.model.override_config.attn_implementation": "eager",  # verl's default needs flash-attn
    "reward.num_workers": 1,
    "data.dataloader_num_workers": 0,
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
}


# verl config values of a run on one GPU with the hf rollout instead of vLLM: CPU_OVERRIDES' one-process set-up
# without the CPU platform's entries (`GPU_HF_DROPS`) and with `GPU_HF_DIFFERENCES`. The rollout's name selects this
# set-up, so it is here for the conflict check only. Derived, so a shared entry cannot change in one and not the other.
GPU_HF_DROPS = (
    # verl's default mixed precision (bf16 parameters, fp32 reduction) instead of the CPU's float32
    "actor_rollout_ref.actor.fsdp_config.mixed_precision",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision",
    "ray_kwargs.ray_init.num_gpus",  # the CPU's logical Ray GPU: Ray finds the real one
)
GPU_HF_DIFFERENCES = {
    "trainer.device": "cuda",
    # PyTorch's SDPA: verl's default flash_attention_2 needs the flash-attn package
    "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
}
# (the dict union keeps CPU_OVERRIDES' key order, so the rendered verl command line is the same as before)
GPU_HF_OVERRIDES = {key: value for key, value in CPU_OVERRIDES.items() if key not in GPU_HF_DROPS} | GPU_HF_DIFFERENCES


def source_root() -> Path:
    """The folder holding the ``dara`` package that is running now (a checkout's ``src`` or site-packages)."""
    return Path(dara.__file__).resolve().parent.parent


def worker_environment(env: dict[str, str] | None = None, device: str = "cpu") -> dict[str, str]:
    """``env`` plus what every verl process of a CPU run (``device`` "cpu") or of a GPU run with the hf rollout
    ("cuda") needs, all values strings (Ray refuses others).

    PYTHONPATH starts with the folder of the running ``dara`` package, so Ray workers import this very code (not
    another installed copy); ``VERL_USE_EXTERNAL_MODULES`` makes ``import verl`` load the backend (on a GPU only its
    hf rollout and trl check act: the other pieces apply to the cpu platform alone). On the CPU, ``VERL_PLATFORM``
    selects its platform and ``VERL_ENGINE_DEVICE=cuda`` makes verl pick its FSDP training engine, which is
    registered for accelerators only and runs on CPU once the platform is ``cpu``; on a GPU verl detects its own.
    """
    check_device(device)
    out = {str(k): str(v) for k, v in (env or {}).items()}
    modules = [m for m in out.get("VERL_USE_EXTERNAL_MODULES", os.environ.get("VERL_USE_EXTERNAL_MODULES", ""))
               .split(",") if m]
    if BACKEND_MODULE not in modules:
        modules.append(BACKEND_MODULE)
    out["VERL_USE_EXTERNAL_MODULES"] = ",".join(modules)
    if device == "cpu":
        out["VERL_PLATFORM"] = "cpu"
        out["VERL_ENGINE_DEVICE"] = "cuda"
    out.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    paths = [p for p in out.get("PYTHONPATH", os.environ.get("PYTHONPATH", "")).split(os.pathsep) if p]
    root = str(source_root())
    out["PYTHONPATH"] = os.pathsep.join([root] + [p for p in paths if p != root])
    return out
