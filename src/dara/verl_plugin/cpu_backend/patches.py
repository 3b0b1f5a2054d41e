"""The verl functions the CPU backend replaces (pieces 2, 3 and 5 of `dara.verl_plugin.cpu_backend`): the process
group's backend string, the reference policy's pinned-memory offload, and verl's trl check. Each replacement marks
itself (``_dara_cpu``), so installing twice changes nothing."""

from __future__ import annotations

import functools

from dara.verl_plugin.cpu_backend.cpu_platform import on_cpu


def patch_process_group() -> None:
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_dara_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if on_cpu() and (backend is None or "gloo" in backend):
            backend = "gloo"  # "cpu:gloo,cpu:gloo" names the cpu device twice, which torch refuses
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray._dara_cpu = True
    initialize_global_process_group_ray.__doc__ = original.__doc__
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray


def patch_offload_policy() -> None:
    import sys

    import torch.distributed.fsdp as fsdp

    base = fsdp.CPUOffloadPolicy
    if getattr(base, "_dara_cpu", False):
        return

    class _UnpinnedCPUOffloadPolicy(base):
        """torch's CPUOffloadPolicy; on the cpu platform pin_memory is off (pinning needs an accelerator)."""

        _dara_cpu = True

        def __init__(self, pin_memory: bool = True, **kwargs):
            super().__init__(pin_memory=pin_memory and not on_cpu(), **kwargs)

    _UnpinnedCPUOffloadPolicy.__name__ = "CPUOffloadPolicy"
    fsdp.CPUOffloadPolicy = _UnpinnedCPUOffloadPolicy
    # verl takes the class from torch when verl.utils.fsdp_utils is imported; if that already happened, swap it there
    for name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "CPUOffloadPolicy", None) is base:
            module.CPUOffloadPolicy = _UnpinnedCPUOffloadPolicy


def _trl_has_value_head() -> bool:
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        return False
    for module in ("trl.experimental.ppo", "trl"):
        try:
            if hasattr(__import__(module, fromlist=["AutoModelForCausalLMWithValueHead"]),
                       "AutoModelForCausalLMWithValueHead"):
                return True
        except ImportError:
            continue
    return False


def patch_trl_check() -> None:
    import verl.utils.import_utils as import_utils

    if getattr(import_utils.is_trl_available, "_dara_cpu", False):
        return
    available = functools.cache(_trl_has_value_head)
    available._dara_cpu = True
    import_utils.is_trl_available = available
