"""DARA in TRL: ``DaraGRPOTrainer``, a ``trl.GRPOTrainer`` whose multi-reward advantages come from
``dara.advantages.compute_advantages`` (see ``dara.trl.trainer`` and docs/trl.md), and
``DensityMonitorGRPOTrainer``, TRL's own trainer with the density diagnostics logged (``dara.trl.monitor``). Needs
TRL (``envs/trl.txt``)."""

import warnings

import trl

from dara.trl.monitor import DensityMonitorGRPOTrainer, DensityMonitorMixin, monitor_metrics
from dara.trl.trainer import BatchAdvantages, DaraGRPOConfig, DaraGRPOTrainer, batch_advantages, process_slice

__all__ = ["TRL_VERSION", "BatchAdvantages", "DaraGRPOConfig", "DaraGRPOTrainer", "DensityMonitorGRPOTrainer",
           "DensityMonitorMixin", "batch_advantages", "monitor_metrics", "process_slice", "untested_trl"]

# The TRL release these subclasses were written and tested against. They override TRL's private methods
# (``_calculate_rewards``, ``_generate_and_score_completions``) and read its ``_logs``/``_metrics``, which a later 1.x
# may change without notice, so another version is allowed (``dara[trl]`` accepts 1.16 or a later 1.x) but warned.
TRL_VERSION = "1.16.0"


def untested_trl(version: str) -> str | None:
    """The warning for a TRL ``version`` other than `TRL_VERSION`, or None."""
    if version == TRL_VERSION:
        return None
    return (f"dara.trl was written and tested against TRL {TRL_VERSION} and overrides its private methods "
            f"(_calculate_rewards, _generate_and_score_completions); TRL {version} is untested: check the advantages "
            "and the dara/ metrics of a first run (docs/trl.md)")


if (_message := untested_trl(trl.__version__)) is not None:
    warnings.warn(_message, UserWarning, stacklevel=2)
