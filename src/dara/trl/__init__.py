"""DARA in TRL: ``DaraGRPOTrainer``, a ``trl.GRPOTrainer`` whose multi-reward advantages come from
``dara.advantages.compute_advantages`` (see ``dara.trl.trainer`` and docs/trl.md), and
``DensityMonitorGRPOTrainer``, TRL's own trainer with the density diagnostics logged (``dara.trl.monitor``). Needs
TRL (``envs/trl.txt``)."""

from dara.trl.monitor import DensityMonitorGRPOTrainer, DensityMonitorMixin, monitor_metrics
from dara.trl.trainer import BatchAdvantages, DaraGRPOConfig, DaraGRPOTrainer, batch_advantages, process_slice

__all__ = ["BatchAdvantages", "DaraGRPOConfig", "DaraGRPOTrainer", "DensityMonitorGRPOTrainer", "DensityMonitorMixin",
           "batch_advantages", "monitor_metrics", "process_slice"]
