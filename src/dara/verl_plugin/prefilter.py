"""The rollout pool before dynamic sampling: what the estimator would report for every group verl filtered.

With dynamic sampling (``algorithm.filter_groups``), verl 0.9.1's V1 replay buffer drops each finished group whose
filter metric is the same for all its responses and generates more until a batch is full, so the advantage step,
and with it ``dara/density/*``, sees only the surviving groups: their densities are biased toward 1. The paper's
release logs the pool before the filter (``rollout_prefilter/...``), and so does `PrefilterReplayBuffer`: it reads
the reward channels of every group the filter classifies while one training batch is gathered, runs
`dara.advantages.compute_advantages` on that pool and reports its density, weight, active groups, energies and
group count as ``dara/rollout_prefilter/<quantity>[/<reward>]`` (columns ``rollout_prefilter/...`` of
metrics.parquet). Advantages and training are untouched. The pool is the finished groups: a group whose rollout
failed is never classified by the filter, so it is not in the pool (with ``sync_refill_failed_groups`` off verl can
still train on its surviving responses).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np
from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer

from dara.advantages import METRIC_PREFIX, compute_advantages
from dara.verl_plugin.estimators import check_options

PREFIX = f"{METRIC_PREFIX}rollout_prefilter"


def prefilter_metrics(method: str, settings, rewards: Sequence[Sequence[float]], uids: Sequence[str]) -> dict[str, float]:
    """The estimator's batch metrics on a pool of responses (rows of ``rewards``, grouped by ``uids``), named
    ``dara/rollout_prefilter/...``. No batch normalisation: densities, weights and energies come before it."""
    check_options(method, settings, len(settings.reward_keys))
    result = compute_advantages(method, np.asarray(rewards, dtype=np.float64), np.asarray(list(uids), dtype=object),
                                replace(settings.estimator_options, batch_norm="none"),
                                channel_names=settings.reward_keys)
    return {f"{PREFIX}/{name}": float(value) for name, value in result.metrics.items()}


def reward_rows(keys: Iterable[str], extra_fields: Iterable, reward_keys: Sequence[str]) -> list[list[float]]:
    """Each trajectory's reward channels from its ``extra_fields["reward_extra_info"]`` (what our reward
    functions return); a trajectory without one of them is an error, not a silent zero."""
    rows = []
    for key, value in zip(keys, extra_fields, strict=True):
        extra = getattr(value, "data", value)
        info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
        missing = [name for name in reward_keys if name not in info]
        if missing:
            raise RuntimeError(f"trajectory {key!r} has no reward channel {missing} in reward_extra_info; "
                               f"algorithm.dara.reward_keys must name what the reward function returns")
        rows.append([float(info[name]) for name in reward_keys])
    return rows


class PrefilterReplayBuffer(verl_replay_buffer.ReplayBuffer):
    """verl's synchronous replay buffer that also measures the pool before its group filter; see `attach`."""

    method: str
    settings: object

    @classmethod
    def attach(cls, buffer: verl_replay_buffer.ReplayBuffer, method: str, settings) -> "PrefilterReplayBuffer":
        """Give a buffer verl built this class's behaviour. verl's trainer assembles the constructor's arguments
        from its config in some thirty lines; re-typing the built object keeps that logic verl's own."""
        if type(buffer) is not verl_replay_buffer.ReplayBuffer:
            raise TypeError(f"expected verl's synchronous ReplayBuffer, got {type(buffer).__name__}")
        buffer.__class__ = cls
        buffer.method, buffer.settings = method, settings
        buffer._pool_rewards, buffer._pool_uids = [], []
        return buffer

    def _dapo_filtered_keys(self, partition_id: str):
        # verl classifies each finished group once (validation never): record the groups classified now
        classified = set(self._dapo_classification_cache[partition_id])
        filtered = super()._dapo_filtered_keys(partition_id)
        self._record(partition_id, set(self._dapo_classification_cache[partition_id]) - classified)
        return filtered

    def _record(self, partition_id: str, uids: set[str]) -> None:
        keys = sorted(key for key in self.partitions[partition_id] if key.split("_")[0] in uids)
        if not keys:
            return
        data = verl_replay_buffer.tq.kv_batch_get(keys=keys, partition_id=partition_id,
                                                  select_fields=["extra_fields"])
        self._pool_rewards += reward_rows(keys, data["extra_fields"], self.settings.reward_keys)
        self._pool_uids += [key.split("_")[0] for key in keys]

    def sample(self, global_steps: int, partition_id: str, batch_size: int):
        self._pool_rewards, self._pool_uids = [], []
        batch, metrics = super().sample(global_steps, partition_id, batch_size)
        if self._pool_uids:
            metrics.update(prefilter_metrics(self.method, self.settings, self._pool_rewards, self._pool_uids))
        return batch, metrics
