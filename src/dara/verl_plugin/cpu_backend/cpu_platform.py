"""verl's ``cpu`` platform (piece 1 of `dara.verl_plugin.cpu_backend`): device name ``cpu``, the gloo collective
backend, a device module whose accelerator memory and stream calls are no-ops, and a Ray resource named GPU."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

PLATFORM_NAME = "cpu"


class _CPUDeviceModule:
    """What verl calls on ``get_torch_device()``: torch.cpu's functions, no-ops for accelerator memory and caches."""

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"  # verl passes it as a device (tensor.to(get_device_id())); torch.cpu.current_device() agrees

    @staticmethod
    def get_device_name(*_args) -> str:
        return "cpu"

    @staticmethod
    def set_device(*_args) -> None:
        return None

    @staticmethod
    def synchronize(*_args) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(*_args, **_kwargs) -> None:
        return None

    @staticmethod
    def get_rng_state(*_args) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *_args) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def mem_get_info(*_args) -> tuple[int, int]:
        pages, size = os.sysconf("SC_AVPHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        return pages * size, os.sysconf("SC_PHYS_PAGES") * size

    @staticmethod
    def memory_allocated(*_args) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated


def platform_class():
    from verl.plugin.platform.platform_base import PlatformBase

    class PlatformCPU(PlatformBase):
        """verl platform ``cpu`` (piece 1 of `dara.verl_plugin.cpu_backend`)."""

        _device_module = _CPUDeviceModule()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "cpu"

        @property
        def device_module(self):
            return self._device_module

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return False  # never auto-detected: selected with VERL_PLATFORM=cpu only

        def current_device(self) -> str:
            return "cpu"  # used as a device argument throughout verl (get_device_id)

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index=None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_gpus": num_gpus}

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def rollout_env_vars(self) -> dict[str, str]:
            return {}

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def cudart(self):
            return None

    return PlatformCPU


def on_cpu() -> bool:
    """Whether verl runs on this platform (VERL_PLATFORM=cpu)."""
    from verl.utils.device import get_device_name

    return get_device_name() == PLATFORM_NAME
