"""DARA in TRL: ``DaraGRPOTrainer``, a ``trl.GRPOTrainer`` whose multi-reward advantages come from
``dara.advantages.compute_advantages`` (see ``dara.trl.trainer`` and docs/trl.md). Needs TRL (``envs/trl.txt``)."""

from dara.trl.trainer import BatchAdvantages, DaraGRPOConfig, DaraGRPOTrainer, batch_advantages, process_slice

__all__ = ["BatchAdvantages", "DaraGRPOConfig", "DaraGRPOTrainer", "batch_advantages", "process_slice"]
