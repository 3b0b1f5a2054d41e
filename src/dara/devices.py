"""Where a run computes: the one home of the ``device`` setting, for the tiny trainer, dara.trl, the hf rollout and the
verl launcher alike.

Kept light (torch is imported only when a torch device is asked for): the verl launcher and `dara.verl_plugin.cpu`
import it without torch, transformers or verl.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import torch

# "cpu", the default of every CPU trainer, or "cuda" (the current GPU; the GPU check, docs/gpu_check.md).
DEVICES = ("cpu", "cuda")
# A verl run without a ``device`` in its paper settings trains on GPUs: the paper's scale.
VERL_DEFAULT_DEVICE = "cuda"


def check_device(device: str) -> str:
    """``device`` itself, if it is one of `DEVICES`; a ValueError naming it otherwise."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}; got {device!r}")
    return device


def torch_device(device: str) -> "torch.device":
    """The torch device of a ``device`` setting (`DEVICES`): a ValueError for another name, a RuntimeError for
    "cuda" where torch sees no CUDA GPU (rather than a silent fall-back to the CPU)."""
    import torch

    check_device(device)
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device 'cuda' was asked for, but this torch ({torch.__version__}) sees no CUDA GPU "
                           "(torch.cuda.is_available() is False: no GPU, no working driver, a CPU-only build, or "
                           "an empty CUDA_VISIBLE_DEVICES in this process); use device 'cpu'")
    return torch.device(device)


def device_config_entries(device: str) -> dict[str, str]:
    """What a run's config.yaml records of its ``device``: nothing for "cpu", so a CPU run's config.yaml (and the
    resume check that compares it) has no device entry, as before the setting existed; ``{"device": device}``
    otherwise, since another device rounds otherwise and a state from one device must not resume on another."""
    return {} if check_device(device) == "cpu" else {"device": device}


def verl_device(settings: Mapping[str, Any]) -> str:
    """The device of a verl run's (paper) settings: its ``device``, else `VERL_DEFAULT_DEVICE`."""
    return check_device(settings.get("device", VERL_DEFAULT_DEVICE))
