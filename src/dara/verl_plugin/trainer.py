"""A verl V1 trainer whose advantage step hands the per-reward columns to our estimators.

verl 0.9.1's V1 trainer (`verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage`) fetches only uid,
response mask, scores and log-probs from TransferQueue, so no estimator sees the reward channels. This subclass of
`PPOTrainerSync`, registered as ``dara_sync``, fetches the rollout's ``extra_fields`` as well, turns each sample's
``reward_extra_info`` (the dict our reward function returned) into one column per reward, and calls the estimator
with them. Every other estimator name goes through verl's step unchanged.

Monitor mode (``+algorithm.dara.monitor=true``): every step, whatever the estimator (verl's own ``grpo`` and
``gdpo`` included, their advantages unchanged), the trainer logs `dara.diagnose.batch_diagnostics` of the batch's
reward columns under ``dara_monitor/``: each reward's density, DARA's weight and every method's energy share.

With ``trainer.rollout_data_dir`` set, verl's rollout dump (one JSONL per step) gets a ``group`` column (the
prompt's uid), one column per key of each sample's ``reward_extra_info``, which verl 0.9.1's V1 dump leaves out, and
``policy_step``: the number of updates before the rollout, the step of metrics.parquet's row for it (verl's own
``step`` column is one more; `dara.verl_backend.logs`). ``dara diagnose DIR --group group --step policy_step
--reward format --reward correctness`` then reads it, whatever the estimator.

GD2PO-Hard's per-response loss weight (the kept fraction of the group) is written as ``rollout_is_weights``: verl's
policy losses multiply the clipped per-token loss by it after the PPO max and keep the masked-mean denominator,
which is where the study applies it. That field is otherwise verl's rollout-correction weight, so the two cannot be
combined (refused below).
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import torch
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from dara.diagnose import MONITOR_PREFIX, batch_diagnostics
from dara.verl_plugin import TRAINER_MODE, assert_registered, policy_step
from dara.verl_plugin.estimators import METHOD_BY_VERL_NAME, DaraSettings, dara_advantages, named_metrics
from dara.verl_plugin.prefilter import PrefilterReplayBuffer
from dara.verl_plugin.rewards import parse_failure_metrics_from_extra_fields

# What verl's own step fetches, plus the rollout's extra fields that carry reward_extra_info.
ADVANTAGE_FIELDS = ("uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "values")
EXTRA_FIELDS = "extra_fields"
REPLAY_POLL_SECONDS = 0.05


def reward_extra_columns(extra_fields, reward_keys) -> dict[str, np.ndarray]:
    """Per-reward numpy columns out of the per-sample ``extra_fields`` (each a dict holding ``reward_extra_info``)."""
    rows = extra_fields.tolist() if hasattr(extra_fields, "tolist") else list(extra_fields)
    columns: dict[str, list[float]] = {key: [] for key in reward_keys}
    for position, row in enumerate(rows):
        row = getattr(row, "data", row)
        info = row.get("reward_extra_info") if isinstance(row, dict) else None
        if not isinstance(info, dict):
            raise ValueError(f"sample {position} has no reward_extra_info in its extra_fields: {row!r}")
        for key in reward_keys:
            if key not in info:
                raise KeyError(
                    f"sample {position} lacks reward {key!r} (reward_extra_info keys: {sorted(info)}); the reward "
                    "function must return every key in algorithm.dara.reward_keys"
                )
            value = info[key]
            if not isinstance(value, Real):  # a string or None would be coerced (or fail) far from its source
                raise ValueError(f"sample {position}: reward {key!r} is {value!r}, not a number")
            columns[key].append(float(value))
    return {key: np.asarray(values, dtype=np.float64) for key, values in columns.items()}


# The fields of verl's dump rows; a reward key of the same name is written as reward_extra/<key> instead.
DUMP_FIELDS = ("input", "output", "gts", "score", "step", "uid", "group", "policy_step")


def rollout_dump_columns(keys, extra_fields, verl_step: int) -> dict[str, list]:
    """The columns `DaraPPOTrainer` adds to verl's rollout dump of verl step ``verl_step``: ``group`` (the uid part
    of each TransferQueue key ``{uid}_{session}_{index}``), ``policy_step`` (the updates before the rollout: its
    metrics.parquet row, `dara.verl_plugin.policy_step`) and every key of each sample's
    ``reward_extra_info`` (None where a sample lacks it). ``extra_fields`` holds the per-sample entries fetched for
    ``keys``, as TransferQueue returns them (None: no extra fields, only the group and the step)."""
    columns: dict[str, list] = {"group": [str(key).rsplit("_", 2)[0] for key in keys],
                                "policy_step": [policy_step(verl_step)] * len(keys)}
    if extra_fields is None:
        return columns
    rows = extra_fields.tolist() if hasattr(extra_fields, "tolist") else list(extra_fields)
    if len(rows) != len(keys):
        raise ValueError(f"{len(rows)} extra_fields entries for {len(keys)} dumped rows")
    infos = []
    for row in rows:
        row = getattr(row, "data", row)
        info = row.get("reward_extra_info") if isinstance(row, dict) else None
        infos.append(info if isinstance(info, dict) else {})
    names = list(dict.fromkeys(name for info in infos for name in info))
    for name in names:
        column = f"reward_extra/{name}" if name in DUMP_FIELDS else name
        columns[column] = [info.get(name) for info in infos]
    return columns


def monitor_metrics(settings: DaraSettings, columns: dict[str, np.ndarray], uids: np.ndarray, metrics: dict) -> None:
    """`dara.diagnose.batch_diagnostics` of one batch's reward columns, into ``metrics`` under ``dara_monitor/``."""
    rewards = np.stack([columns[key] for key in settings.reward_keys], axis=1)
    found = batch_diagnostics(rewards, uids, settings.reward_keys, w_max=settings.w_max,
                              static_weights=settings.static_weights)
    metrics.update({f"{MONITOR_PREFIX}{name}": value for name, value in found.items()})


def check_one_output_per_session(keys) -> None:
    """Refuse batches in which a rollout session produced several outputs (multi-turn agent loops).

    TransferQueue keys read ``{uid}_{session_id}_{index}``. verl's own step scores only the last output of such a
    session and broadcasts its advantage to the others (`verl.trainer.ppo.v1.utils.
    compute_advantage_for_multi_trajectories`); our estimators treat every row as one response of its group, so
    they would count a session several times. The study's tasks are single-turn.
    """
    sessions: dict[str, int] = {}
    for key in keys:
        parts = str(key).rsplit("_", 2)
        if len(parts) != 3:
            raise ValueError(f"unexpected TransferQueue key {key!r}; expected {{uid}}_{{session_id}}_{{index}}")
        session = f"{parts[0]}_{parts[1]}"
        sessions[session] = sessions.get(session, 0) + 1
        if sessions[session] > 1:
            raise ValueError(
                f"rollout session {session!r} has several outputs (multi-turn agent loop); the DARA estimators "
                "take one response per session"
            )


@register_trainer(TRAINER_MODE)
class DaraPPOTrainer(PPOTrainerSync):
    """`PPOTrainerSync` with the DARA advantage step (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        # verl hides plugin errors, so a job started by verl's own main_ppo checks here that every estimator of ours
        # is registered before anything is built (this trainer is, or its constructor would not run; our launcher,
        # dara.verl_plugin.main, checks both before verl starts)
        assert_registered(require_trainer=False)
        super().__init__(*args, **kwargs)

    # verl 0.9.1 compares `self.trainer_mode` with "sync" to pick the replay buffer, refill and checkpoint paths;
    # selecting this class by its registry name must not change any of that.
    @property
    def trainer_mode(self) -> str:
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, name: str) -> None:
        if name not in (TRAINER_MODE, "sync"):
            raise ValueError(f"{type(self).__name__} runs as trainer_mode {TRAINER_MODE!r}, got {name!r}")

    def _build_replay_buffer(self):
        """verl's buffer with a 50 ms poll, measuring the pool before dynamic sampling's filter (prefilter.py).

        The poll: verl's buffer sleeps 2 s (a constructor default no setting reaches) between checks for a finished
        rollout, so a step's generation phase lasted a whole number of polls (4.0 s on CPU with the tiny tasks, for
        about 3.5 s of generation); beside a GPU step of minutes that is noise."""
        buffer = super()._build_replay_buffer()
        if hasattr(buffer, "poll_interval"):
            buffer.poll_interval = REPLAY_POLL_SECONDS
        # dynamic sampling: also log the pool before the filter (dara.verl_plugin.prefilter)
        method = METHOD_BY_VERL_NAME.get(str(self.config.algorithm.adv_estimator))
        if method is not None and type(buffer) is ReplayBuffer and buffer.filter_groups_metric is not None:
            buffer = PrefilterReplayBuffer.attach(buffer, method, DaraSettings.from_algorithm_config(self.config.algorithm))
        return buffer

    def _log_rollout_data(self, batch, timing_raw: dict, rollout_data_dir: str):
        # verl's dump, with the batch at hand for _dump_generations' extra columns
        self._dumping = batch
        try:
            super()._log_rollout_data(batch, timing_raw, rollout_data_dir)
        finally:
            self._dumping = None

    def _dump_generations(self, inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path):
        batch = getattr(self, "_dumping", None)
        if batch is not None and "uid" in reward_extra_infos_dict:
            keys = list(reward_extra_infos_dict["uid"])  # TransferQueue keys, in the dump's row order
            data = trainer_base.tq.kv_batch_get(keys=keys, partition_id=batch.partition_id,
                                                select_fields=[EXTRA_FIELDS])
            extra = data[EXTRA_FIELDS] if EXTRA_FIELDS in data.keys() else None
            reward_extra_infos_dict = {**reward_extra_infos_dict,
                                       **rollout_dump_columns(keys, extra, self.global_steps)}
        return super()._dump_generations(inputs, outputs, gts, scores, reward_extra_infos_dict, dump_path)

    def _monitor(self, batch, metrics: dict) -> None:
        """dara_monitor/ diagnostics for verl's own estimators, whose step fetches no reward columns: fetch them
        (read-only: nothing is written back)."""
        settings = DaraSettings.from_algorithm_config(self.config.algorithm)
        data = trainer_base.tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                                            select_fields=["uid", EXTRA_FIELDS])
        if EXTRA_FIELDS not in data.keys():
            raise KeyError("the rollout wrote no extra_fields, so the monitor has no per-reward columns")
        uid = data["uid"]
        uids = np.array(uid.tolist() if hasattr(uid, "tolist") else list(uid), dtype=object)
        monitor_metrics(settings, reward_extra_columns(data[EXTRA_FIELDS], settings.reward_keys), uids, metrics)

    def _compute_advantage(self, batch, metrics: dict):
        estimator = str(self.config.algorithm.adv_estimator)
        method = METHOD_BY_VERL_NAME.get(estimator)
        if method is None:
            section = self.config.algorithm.get("dara", None)
            if section is not None and section.get("monitor", False):
                self._monitor(batch, metrics)
            return super()._compute_advantage(batch, metrics=metrics)
        settings = DaraSettings.from_algorithm_config(self.config.algorithm)
        check_one_output_per_session(batch.keys)
        tq = trainer_base.tq

        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=[*ADVANTAGE_FIELDS, EXTRA_FIELDS]
        )
        if EXTRA_FIELDS not in data.keys():
            raise KeyError("the rollout wrote no extra_fields, so the per-reward columns are missing")
        extra_fields = data.pop(EXTRA_FIELDS)
        columns = reward_extra_columns(extra_fields, settings.reward_keys)
        metrics.update(parse_failure_metrics_from_extra_fields(extra_fields, settings.reward_keys))
        response_mask = data["response_mask"]
        data = DataProto(batch=data.to_padded_tensor())
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
        data.non_tensor_batch.update(columns)
        if settings.monitor:  # from the columns just fetched
            monitor_metrics(settings, columns, data.non_tensor_batch["uid"], metrics)

        if self.config.algorithm.use_kl_in_reward:
            data, kl_metrics = trainer_base.apply_kl_penalty(
                data, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=self.config.algorithm.kl_penalty
            )
            metrics.update(kl_metrics)
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]

        rollout_corr_config = self.config.algorithm.get("rollout_correction", None)
        bypass = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)
        rollout_correction = (
            rollout_corr_config is not None and "rollout_log_probs" in data.batch.keys() and not bypass
        )
        if rollout_correction:
            data, is_metrics = trainer_base.compute_rollout_correction_and_add_to_batch(data, rollout_corr_config)
            metrics.update(is_metrics)

        advantages, result = dara_advantages(
            method,
            data.batch["token_level_rewards"],
            data.batch["response_mask"],
            data.non_tensor_batch["uid"],
            settings,
            data.non_tensor_batch,
        )
        data.batch["advantages"] = advantages
        data.batch["returns"] = advantages
        metrics.update(named_metrics(result, method, settings, data.non_tensor_batch))

        fields = ["advantages", "returns"]
        if self.config.algorithm.use_kl_in_reward:
            fields.append("token_level_rewards")
        if rollout_correction:
            fields.append("response_mask")
            if "rollout_is_weights" in data.batch.keys():
                fields.append("rollout_is_weights")
        if method == "gd2po_hard":
            if "rollout_is_weights" in data.batch.keys():
                raise ValueError(
                    "GD2PO-Hard carries its per-response loss weight in rollout_is_weights, which rollout "
                    "correction also sets; disable algorithm.rollout_correction for dara_gd2po_hard"
                )
            loss_weights = result.loss_weights.to(device=advantages.device, dtype=torch.float32)
            data.batch["rollout_is_weights"] = loss_weights.unsqueeze(-1) * data.batch["response_mask"].to(
                torch.float32
            )
            fields.append("rollout_is_weights")

        output = TensorDict(
            {field: trainer_base.response_to_nested(data.batch[field], response_mask) for field in fields},
            batch_size=len(batch),
        )
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
