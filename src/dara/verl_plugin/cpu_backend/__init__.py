"""The CPU backend of verl 0.9.1, installed from outside verl: ``VERL_USE_EXTERNAL_MODULES=dara.verl_plugin.cpu_backend``.

verl imports the modules named there at the end of ``import verl``, in the driver and in every Ray worker, before
any trainer, worker or rollout code runs; importing this package calls `install`. Nothing of verl is edited. Each
piece replaces one thing that stops stock verl on a machine without an accelerator (piece 1 lives in `cpu_platform`,
4 in `hf_rollout`, the replaced functions 2, 3 and 5 in `patches`):

1. Platform. verl knows nvidia, npu and rocm platforms only (``verl.plugin.platform``) and falls back to nvidia.
   `PlatformCPU` is registered as ``cpu`` (selected with ``VERL_PLATFORM=cpu``): device name ``cpu``, the gloo
   collective backend, a device module whose memory and stream calls are no-ops (`_CPUDeviceModule`), and a Ray
   resource named GPU, which the launcher declares once (``ray_init.num_gpus=1``) because verl's resource pool
   always asks Ray for GPUs.
2. Process group. `verl.utils.distributed.initialize_global_process_group_ray` builds the backend string
   ``cpu:gloo,<device>:<backend>``, which is ``cpu:gloo,cpu:gloo`` here and torch rejects; the replacement uses
   plain ``gloo`` when the platform is ``cpu`` and calls verl's function otherwise.
3. Reference-policy offload. verl's FSDP2 engine gives forward-only models (the reference policy)
   ``CPUOffloadPolicy(pin_memory=True)`` (`verl.workers.engine.fsdp.transformer_impl`); pinning memory needs an
   accelerator. `_UnpinnedCPUOffloadPolicy` is the same policy with ``pin_memory=False``, put in place of torch's
   class where verl imports it from.
4. Rollout. verl's rollout backends are vLLM, SGLang and TensorRT-LLM, none of which runs here. The ``hf`` backend
   serves a transformers model from a Ray actor (`HFServer`, launched by `HFReplica`, verl's
   ``RolloutReplica`` interface) and receives the actor's weights through verl's own colocated weight-sync path
   (checkpoint engine ``naive``: the training worker calls `HFServerAdapter.update_weights` with the FSDP
   model's full parameters before every rollout), so every step generates with that step's policy.

5. trl. When trl is installed, verl's model patching (`verl.models.transformers.monkey_patch.apply_monkey_patch`)
   imports trl's ``AutoModelForCausalLMWithValueHead``, which recent trl releases no longer have, and fails on the
   import. `verl.utils.import_utils.is_trl_available` is replaced by a check that the class is importable: without
   it the patch (a state_dict fix for value-head models, which this backend never builds) is skipped.

`install` refuses any verl version but `dara.verl_plugin.VERL_VERSION`: each piece depends on internals of that
release.
"""

from __future__ import annotations

from importlib.metadata import version

from dara.verl_plugin import VERL_VERSION

_INSTALLED = False


def check_verl_version() -> str:
    found = version("verl")
    if found != VERL_VERSION:
        raise RuntimeError(
            f"dara's verl CPU backend is written for verl {VERL_VERSION} and patches its internals; found verl "
            f"{found}. Install verl=={VERL_VERSION} or drop device: cpu."
        )
    return found


def install() -> None:
    """Install the five pieces (idempotent). Run when verl imports this package."""
    global _INSTALLED
    if _INSTALLED:
        return
    check_verl_version()
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from dara.verl_plugin.cpu_backend import hf_rollout, patches
    from dara.verl_plugin.cpu_backend.cpu_platform import PLATFORM_NAME, platform_class

    PlatformRegistry.register(platform=PLATFORM_NAME)(platform_class())
    patches.patch_process_group()
    patches.patch_offload_policy()
    hf_rollout.register_rollout()
    patches.patch_trl_check()
    _INSTALLED = True


install()
