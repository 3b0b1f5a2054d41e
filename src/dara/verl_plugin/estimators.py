"""The study's advantage estimators in verl's shape: registered functions over token-level tensors.

Each estimator takes what verl's trainer hands a registered estimator (``token_level_rewards``, ``response_mask``,
``index`` = the uid array, ``config`` = ``algorithm``) plus ``non_tensor_batch`` with one numpy column per reward
channel, and returns ``(advantages, returns)`` of shape (bs, response_length): the per-response scalar of
`dara.advantages.compute_advantages` broadcast over the response tokens. The channel columns are the keys that the
reward function returns (`dara.verl_plugin.rewards`), named in ``algorithm.dara.reward_keys``.

Settings live under ``algorithm.dara`` (added with Hydra's ``+algorithm.dara.<key>=...``)::

    reward_keys: [format, correctness]   # channel columns, in order (required)
    w_max: 5.0                           # DARA's weight cap
    batch_norm: token                    # "token" (tool stack, verl's masked_whiten) or "response" (math stack)
    static_weights: null                 # static_sym / static_asym only, e.g. [1.0, 5.0]
    tau: 1.0e-8
    eps: 1.0e-6
    gd2po_sign_eps: 1.0e-8               # GD2PO-Hard: |Z| at or below this is neutral, not a sign
    dvao_eps: 1.0e-8                     # DVAO: a group denominator at or below this gives advantage 0
    singleton_groups: zero               # a one-response group: "zero" (advantage 0, inactive, counted in
                                         # dara/singleton_groups) or "raise"
    monitor: false                       # the dara_sync trainer logs dara_monitor/ density diagnostics every
                                         # step (any estimator, verl's own included; advantages unchanged)

Metric names avoid "max", "min", "sum" and "total": verl's V1 aggregator reads those words as reductions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from dara.advantages import (DVAO_DENOM_EPS, EPS, METRIC_PREFIX, SIGN_EPS, TAU, W_MAX, EstimatorOptions,
                             compute_advantages)
from dara.methods import TABLE as METHOD_TABLE
from dara.methods import get_method

# Our method name -> the name registered in verl's estimator registry (`dara.methods`: verl already owns "gdpo" and
# "grpo", so every estimator of ours is prefixed; DARA's own names are kept as they are).
VERL_ESTIMATOR_NAMES = {method.name: method.verl_name for method in METHOD_TABLE}
METHOD_BY_VERL_NAME = {verl_name: method for method, verl_name in VERL_ESTIMATOR_NAMES.items()}
# Words that verl's V1 metric aggregator treats as reductions; none may appear in a metric name of ours.
RESERVED_METRIC_WORDS = ("max", "min", "sum", "total")


@dataclass(frozen=True)
class DaraSettings:
    """The ``algorithm.dara`` section, validated."""

    reward_keys: tuple[str, ...]
    w_max: float = W_MAX
    batch_norm: str = "token"  # the tool stack's token whitening, verl's own masked_whiten
    static_weights: tuple[float, ...] | None = None
    tau: float = TAU
    eps: float = EPS
    gd2po_sign_eps: float = SIGN_EPS
    dvao_eps: float = DVAO_DENOM_EPS
    # verl can hand over a group of one response (failed rollouts, filters that drop rows): a long run logs it
    # (dara/singleton_groups) and goes on, where the library's default refuses such a batch.
    singleton_groups: str = "zero"
    monitor: bool = False

    @classmethod
    def from_algorithm_config(cls, config: Any) -> "DaraSettings":
        section = _get(config, "dara")
        if section is None:
            raise ValueError(
                "the DARA estimators need an `algorithm.dara` section with at least reward_keys, "
                "e.g. `+algorithm.dara.reward_keys=[format,correctness]`"
            )
        known = {"reward_keys", "w_max", "batch_norm", "static_weights", "tau", "eps", "gd2po_sign_eps", "dvao_eps",
                 "singleton_groups", "monitor"}
        unknown = sorted(set(_keys(section)) - known)
        if unknown:
            raise ValueError(f"unknown keys in algorithm.dara: {unknown}; known keys: {sorted(known)}")
        keys = _get(section, "reward_keys")
        if keys is None or isinstance(keys, str) or len(list(keys)) == 0:
            raise ValueError(f"algorithm.dara.reward_keys must be a non-empty list of reward names, got {keys!r}")
        keys = tuple(str(k) for k in keys)
        for key in keys:
            reserved = [word for word in RESERVED_METRIC_WORDS if word in key.lower()]
            if reserved:
                raise ValueError(
                    f"reward key {key!r} contains {reserved[0]!r}, which verl's metric aggregator reads as a "
                    "reduction; rename the reward channel"
                )
        # a key the section leaves out takes the field's default above (the library's constants), typed once
        default = {f.name: f.default for f in fields(cls)}

        def setting(name: str):
            return _get(section, name, default[name])

        batch_norm = str(setting("batch_norm"))
        if batch_norm not in ("token", "response"):
            raise ValueError(f"algorithm.dara.batch_norm must be 'token' or 'response', got {batch_norm!r}")
        static = setting("static_weights")
        singletons = str(setting("singleton_groups"))
        if singletons not in ("zero", "raise"):
            raise ValueError(f"algorithm.dara.singleton_groups must be 'zero' or 'raise', got {singletons!r}")
        return cls(
            reward_keys=keys,
            w_max=float(setting("w_max")),
            batch_norm=batch_norm,
            static_weights=None if static is None else tuple(float(w) for w in static),
            tau=float(setting("tau")),
            eps=float(setting("eps")),
            gd2po_sign_eps=float(setting("gd2po_sign_eps")),
            dvao_eps=float(setting("dvao_eps")),
            singleton_groups=singletons,
            monitor=_flag(setting("monitor")),
        )


    @property
    def estimator_options(self) -> EstimatorOptions:
        """The `dara.advantages` options of this section (the method reads its own, `dara.methods`)."""
        return EstimatorOptions(w_max=self.w_max, tau=self.tau, eps=self.eps, batch_norm=self.batch_norm,
                                static_weights=self.static_weights, sign_eps=self.gd2po_sign_eps,
                                dvao_eps=self.dvao_eps, singletons=self.singleton_groups)


# `EstimatorOptions` fields whose algorithm.dara key is spelt otherwise: errors name the key the user wrote.
VERL_OPTION_KEYS = {"sign_eps": "gd2po_sign_eps", "singletons": "singleton_groups"}
VERL_OPTION_LABELS = {option.name: f"algorithm.dara.{VERL_OPTION_KEYS.get(option.name, option.name)}"
                      for option in fields(EstimatorOptions)}


def check_options(method: str, settings: DaraSettings, n_channels: int) -> None:
    """`EstimatorOptions.check_for`, its errors naming the ``algorithm.dara`` key (``gd2po_sign_eps``, ...)."""
    settings.estimator_options.check_for(method, n_channels, labels=VERL_OPTION_LABELS)


def _flag(value) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"algorithm.dara.monitor must be true or false, got {value!r}")


def reward_columns(non_tensor_batch: Mapping[str, Any], reward_keys, n_rows: int) -> np.ndarray:
    """Stack the per-reward columns of a batch into an (n_rows, K) float64 array, refusing missing or bad ones."""
    columns = []
    for key in reward_keys:
        if key not in non_tensor_batch:
            raise KeyError(
                f"reward column {key!r} is not in the batch (columns: {sorted(non_tensor_batch)}); the reward "
                "function must return it in its dict"
            )
        values = non_tensor_batch[key]
        try:
            column = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as error:
            raise ValueError(f"reward column {key!r} must hold one number per response: {error}") from None
        if column.shape[0] != n_rows:
            raise ValueError(f"reward column {key!r} has {column.shape[0]} values for {n_rows} responses")
        columns.append(column)
    return np.stack(columns, axis=1)


def dara_advantages(
    method: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    settings: DaraSettings,
    non_tensor_batch: Mapping[str, Any],
):
    """The token-level advantages of ``method`` and the `AdvantageResult` behind them.

    GRPO keeps verl's meaning (the z-score of the summed token rewards, so a reward-KL penalty counts); its channel
    diagnostics come from the reward columns. Every other method reads the unpenalised reward columns.
    """
    spec = get_method(method)
    if settings.static_weights is not None and not spec.needs_static_weights:
        raise ValueError(
            f"algorithm.dara.static_weights is only used by dara_static_sym/dara_static_asym, not by "
            f"{VERL_ESTIMATOR_NAMES[method]}; remove it or pick a static estimator"
        )
    mask = response_mask.to(torch.float32)
    rewards = reward_columns(non_tensor_batch, settings.reward_keys, mask.shape[0])
    options = settings.estimator_options
    check_options(method, settings, rewards.shape[1])  # an option of another method's is refused, also for GRPO
    lengths = mask.sum(dim=-1).detach().cpu() if settings.batch_norm == "token" else None
    names = list(settings.reward_keys)
    if spec.formula == "grpo":
        # the channel diagnostics of the reward columns; the advantage of the summed token rewards
        result = compute_advantages("gdpo", rewards, index, replace(options.for_method("gdpo"), batch_norm="none"),
                                    channel_names=names)
        summed = (token_level_rewards * mask).sum(dim=-1, keepdim=True).detach().cpu().to(torch.float64)
        scalar = compute_advantages("grpo", summed, index, replace(options.for_method("grpo"), batch_norm="none"))
        result = _with_advantages(result, scalar.advantages)
    else:
        result = compute_advantages(method, rewards, index, options, lengths=lengths, channel_names=names)
    scalar = result.advantages.to(device=mask.device, dtype=torch.float32)
    return scalar.unsqueeze(-1) * mask, result


def named_metrics(result, method: str, settings: DaraSettings, non_tensor_batch: Mapping[str, Any]) -> dict[str, float]:
    """verl-facing metric names: ``dara/<quantity>/<channel>``, the batch mean of every reward channel
    (``dara/reward/<channel>``: verl logs none of them in training) and the method's own counters."""
    metrics = {f"{METRIC_PREFIX}{name}": value for name, value in result.metrics.items()}
    n_rows = len(non_tensor_batch[settings.reward_keys[0]])
    columns = reward_columns(non_tensor_batch, settings.reward_keys, n_rows)
    for position, key in enumerate(settings.reward_keys):
        metrics[f"{METRIC_PREFIX}reward/{key}"] = float(columns[:, position].mean())
    if get_method(method).drops_conflicts:
        metrics[f"{METRIC_PREFIX}gd2po_hard/keep_ratio"] = 1.0 - result.metrics["gd2po_hard/conflict_ratio"]
    return metrics


def make_estimator(method: str):
    """A verl-registrable estimator for one of our methods."""
    verl_name = VERL_ESTIMATOR_NAMES[method]

    def estimator(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: np.ndarray,
        config: Any = None,
        non_tensor_batch: Mapping[str, Any] | None = None,
        metrics: dict | None = None,
        **unused,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if non_tensor_batch is None:
            raise RuntimeError(
                f"estimator {verl_name!r} needs the per-reward columns, which verl only hands to 'gdpo'. Run with "
                "trainer.use_v1=True trainer.v1.trainer_mode=dara_sync (dara.verl_plugin.trainer)."
            )
        settings = DaraSettings.from_algorithm_config(config)
        advantages, result = dara_advantages(
            method, token_level_rewards, response_mask, index, settings, non_tensor_batch
        )
        if metrics is not None:
            metrics.update(named_metrics(result, method, settings, non_tensor_batch))
        return advantages, advantages

    estimator.__name__ = f"compute_{verl_name}_advantage"
    estimator.__qualname__ = estimator.__name__
    estimator.__doc__ = f"verl estimator {verl_name!r}: `dara.advantages.compute_advantages({method!r}, ...)`."
    return estimator


ESTIMATORS = {VERL_ESTIMATOR_NAMES[method]: make_estimator(method) for method in VERL_ESTIMATOR_NAMES}


def _with_advantages(result, advantages: torch.Tensor):
    return replace(result, advantages=advantages)


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(key, default)
    getter = getattr(config, "get", None)
    if getter is not None:
        return getter(key, default)
    return getattr(config, key, default)


def _keys(section: Any) -> list[str]:
    if isinstance(section, Mapping) or hasattr(section, "keys"):
        return [str(k) for k in section.keys()]
    raise ValueError(f"algorithm.dara must be a mapping, got {type(section).__name__}")
