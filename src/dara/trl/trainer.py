"""DARA and the other multi-reward estimators inside TRL's ``GRPOTrainer``.

TRL 1.16.0 aggregates several ``reward_funcs`` in one of two fixed ways (``multi_objective_aggregation``) and has no
hook for others. ``DaraGRPOTrainer`` keeps everything of TRL (generation, reward calls, loss, logging) and replaces
only the advantages: TRL's per-reward-function matrix ``rewards_per_func`` (N, K), gathered from every process,
goes through ``dara.advantages.compute_advantages``; each process then keeps its own slice, as TRL does.

    config = DaraGRPOConfig(output_dir="out", dara_method="dara_asym", num_generations=8, ...)
    trainer = DaraGRPOTrainer(model=model, reward_funcs=[format_reward, correctness_reward], args=config,
                              train_dataset=dataset, processing_class=tokenizer)
    trainer.train()

Decisions where TRL allows something the estimators do not define:

- ``reward_weights``, ``multi_objective_aggregation`` and ``scale_rewards`` are TRL's aggregation; they are refused
  unless left at their defaults (channel weights are ``dara_static_weights`` of ``static_sym``/``static_asym``, or
  DVAO's ``dara_base_weights``; the final normalisation is ``dara_batch_norm``).
- A completion every reward function scored as None (a NaN row) is left out of the estimator and gets advantage 0,
  as TRL gives it; a group left with fewer than two scorable completions gets 0 too (no baseline) and counts for
  no channel's density. A completion only *some* functions scored as None is refused with a ``ValueError``: the
  estimators z-score every channel over the whole group and have no definition for a missing entry.
- GD2PO-Hard's per-response loss weight multiplies the advantage. Every TRL 1.16.0 loss type (grpo, bnpo, dr_grpo,
  dapo, luspo, cispo, sapo, vespo) is positively homogeneous in the advantage, and its sign-dependent branches see
  the same sign, so ``A * w`` gives exactly ``w`` times that completion's policy-loss term; the KL and entropy terms
  stay unweighted, as in the tiny trainer.
- In evaluation with ``num_generations_eval=1`` there are no groups: TRL's advantages (all zero) are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig, GRPOTrainer

from dara.advantages import (BATCH_NORM, BATCH_NORMS, EPS, METRIC_PREFIX, TAU, W_MAX, EstimatorOptions,
                             compute_advantages)
from dara.methods import METHODS, get_method
from dara.tiny.gemm import route_products

# TRL's own defaults of the aggregation settings DaraGRPOTrainer replaces; any other value would be ignored.
_TRL_AGGREGATION_DEFAULTS = {"multi_objective_aggregation": "sum_then_normalize", "scale_rewards": "group"}


@dataclass
class DaraGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus the estimator: which method, and its options (``dara.advantages.compute_advantages``)."""

    dara_method: str = field(
        default="dara_sym",
        metadata={"help": f"advantage estimator, one of {', '.join(METHODS)}"},
    )
    dara_w_max: float = field(default=W_MAX, metadata={"help": "DARA's weight cap (>= 1)"})
    dara_static_weights: list[float] | None = field(
        default=None,
        metadata={"help": "one fixed weight per reward function (each >= 1); static_sym/static_asym only"},
    )
    dara_base_weights: list[float] | None = field(
        default=None, metadata={"help": "DVAO's positive channel weights, one per reward function; dvao only"}
    )
    dara_batch_norm: str = field(
        default=BATCH_NORM,
        metadata={"help": "final normalisation of GDPO, GD2PO-Hard, static and DARA: 'response' (per completion), "
                          "'token' (token-weighted, as verl's masked_whiten) or 'none'"},
    )
    dara_eps: float = field(default=EPS, metadata={"help": "added to every standard deviation (TRL uses 1e-4)"})
    dara_tau: float = field(default=TAU, metadata={"help": "a group is active for a reward when sum |Z| > tau"})

    def __post_init__(self):
        super().__post_init__()
        if self.dara_method not in METHODS:
            raise ValueError(f"dara_method={self.dara_method!r} is unknown; valid methods: {', '.join(METHODS)}")
        if self.dara_batch_norm not in BATCH_NORMS:
            raise ValueError(f"dara_batch_norm={self.dara_batch_norm!r} is unknown; valid: {', '.join(BATCH_NORMS)}")
        if self.reward_weights is not None:
            raise ValueError(
                f"reward_weights={self.reward_weights} is TRL's weighting of the summed rewards; DaraGRPOTrainer "
                f"computes advantages with dara_method={self.dara_method!r} instead and would ignore it. For fixed "
                "channel weights use dara_method='static_sym' or 'static_asym' with dara_static_weights; for DVAO "
                "use dara_base_weights.")
        for name, default in _TRL_AGGREGATION_DEFAULTS.items():
            if getattr(self, name) != default:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} selects TRL's own aggregation, which DaraGRPOTrainer replaces "
                    f"(dara_method={self.dara_method!r}; batch normalisation is dara_batch_norm); leave it at "
                    f"{default!r}.")
        if get_method(self.dara_method).needs_static_weights != (self.dara_static_weights is not None):
            raise ValueError(f"dara_static_weights must be set for static_sym/static_asym and only for them "
                             f"(dara_method={self.dara_method!r}, dara_static_weights={self.dara_static_weights})")
        if self.dara_base_weights is not None and get_method(self.dara_method).formula != "dvao":
            raise ValueError(f"dara_base_weights are DVAO's channel weights; dara_method={self.dara_method!r} "
                             "does not use them")

    def estimator_options(self) -> EstimatorOptions:
        """The estimator options of this config (``dara_*``), for ``compute_advantages``."""
        return EstimatorOptions(w_max=self.dara_w_max, tau=self.dara_tau, eps=self.dara_eps,
                                static_weights=self.dara_static_weights, base_weights=self.dara_base_weights,
                                batch_norm=self.dara_batch_norm)


@dataclass(frozen=True)
class BatchAdvantages:
    """Advantages of one generation batch (every process's completions), in TRL's row order.

    advantages: (N,) the estimator's advantages; 0 on unscorable rows and groups.
    loss_weights: (N,) GD2PO-Hard's kept fraction (1 for other methods; 0 where the advantage is forced to 0).
    applied: (N,) ``advantages * loss_weights``, what the policy loss receives.
    scored: (N,) bool, rows that went through the estimator.
    metrics: the estimator's metrics plus ``unscorable_fraction``, ``loss_weight``, ``advantage_abs``.
    """

    advantages: torch.Tensor
    loss_weights: torch.Tensor
    applied: torch.Tensor
    scored: torch.Tensor
    metrics: dict[str, float]


def batch_advantages(method: str, rewards_per_func: torch.Tensor, num_generations: int,
                     options: EstimatorOptions | None = None, *, channel_names: Sequence[str],
                     lengths: torch.Tensor | None = None) -> BatchAdvantages:
    """The method's advantages for TRL's gathered rewards: rows ``[g * G, (g + 1) * G)`` are prompt group g.

    NaN rows (every reward function returned None) are left out and get 0; groups with fewer than two scored rows
    get 0; a row with only some NaN rewards raises ``ValueError``. ``lengths`` (N,) are needed by
    ``batch_norm="token"``. ``options`` (default: the library's) go to ``compute_advantages``.
    """
    rewards = torch.as_tensor(rewards_per_func).detach().to("cpu", torch.float64)
    if rewards.dim() != 2:
        raise ValueError(f"rewards_per_func must be (completions, reward functions), got shape {tuple(rewards.shape)}")
    n_rows, n_channels = rewards.shape
    if len(channel_names) != n_channels:
        raise ValueError(f"{len(channel_names)} reward function names for {n_channels} reward columns")
    if num_generations < 2:
        raise ValueError(f"num_generations={num_generations}: groups need at least two completions")
    if n_rows % num_generations:
        raise ValueError(f"{n_rows} completions are not whole groups of num_generations={num_generations}; TRL "
                         "lays out each prompt's completions as consecutive rows, so the batch must be a multiple")
    missing = torch.isnan(rewards)
    unscorable = missing.all(dim=1)
    partial = missing.any(dim=1) & ~unscorable
    if bool(partial.any()):
        row = int(torch.nonzero(partial)[0])
        names = [channel_names[k] for k in torch.nonzero(missing[row]).flatten().tolist()]
        raise ValueError(
            f"{int(partial.sum())} completion(s) were scored by some reward functions but not others (row {row}: "
            f"{', '.join(names)} returned None). The estimators z-score every reward over the whole group and "
            "define no value for a missing one; return a number from every reward function, or None from all "
            "of them to leave the completion out.")
    if bool(torch.isinf(rewards).any()):
        row, column = (int(v) for v in torch.nonzero(torch.isinf(rewards))[0])
        raise ValueError(f"reward function {channel_names[column]!r} returned {rewards[row, column].item()} "
                         f"for row {row}; rewards must be finite (or None)")
    groups = torch.arange(n_rows) // num_generations
    scored_per_group = torch.bincount(groups[~unscorable], minlength=n_rows // num_generations)
    scored = ~unscorable & (scored_per_group[groups] >= 2)
    advantages = torch.zeros(n_rows, dtype=torch.float32)
    loss_weights = torch.zeros(n_rows, dtype=torch.float32)
    metrics: dict[str, float] = {}
    if bool(scored.any()):
        token_lengths = None
        options = options or EstimatorOptions()
        if options.batch_norm == "token":
            if lengths is None:
                raise ValueError("batch_norm='token' needs the completion lengths")
            token_lengths = torch.as_tensor(lengths).reshape(-1)[scored]
        result = compute_advantages(method, rewards[scored], groups[scored], options, lengths=token_lengths,
                                    channel_names=list(channel_names))
        advantages[scored] = result.advantages
        loss_weights[scored] = result.loss_weights
        metrics.update(result.metrics)
    applied = advantages * loss_weights
    metrics["unscorable_fraction"] = float(unscorable.to(torch.float64).mean())
    metrics["loss_weight"] = float(loss_weights.to(torch.float64).mean())
    metrics["advantage_abs"] = float(advantages.to(torch.float64).abs().mean())
    return BatchAdvantages(advantages, loss_weights, applied, scored, metrics)


def process_slice(process_index: int, local_rows: int, total_rows: int) -> slice:
    """The rows of one process in the gathered batch (TRL gathers processes in rank order, equal sizes)."""
    if local_rows <= 0 or total_rows % local_rows:
        raise ValueError(f"the gathered batch has {total_rows} rows, not a multiple of this process's {local_rows}")
    if not 0 <= process_index < total_rows // local_rows:
        raise ValueError(f"process {process_index} has no rows in a batch of {total_rows // local_rows} processes")
    return slice(process_index * local_rows, (process_index + 1) * local_rows)


class DaraGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages come from ``dara.advantages.compute_advantages`` (``args.dara_method``).

    Metrics (density, weight, active groups, energies per reward function, ``n_groups``, ``loss_weight``,
    ``advantage_abs``, ``unscorable_fraction``) go into TRL's ``self._metrics`` under ``dara/``, so every
    ``report_to`` backend receives them. ``dara_last`` holds the last batch's ``BatchAdvantages`` (all processes).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, DaraGRPOConfig):
            raise TypeError(f"DaraGRPOTrainer needs a DaraGRPOConfig (it names the method), got "
                            f"{type(self.args).__name__}")
        if self.ref_model is not None:
            # TRL loads the reference from the policy's folder itself, past dara.tiny.policy.load_policy: route its
            # linear layers and attention as the policy's config names them (nothing for other policies)
            route_products(self.ref_model)
        names = list(self.reward_func_names)
        if len(set(names)) != len(names):
            raise ValueError(f"reward functions need distinct names (they name the per-reward metrics), got {names}")
        # Validate the options against the number of reward functions now, not at the first batch: the same
        # checks compute_advantages runs, on a two-row dummy batch.
        dummy_lengths = torch.ones(2) if self.args.dara_batch_norm == "token" else None
        try:
            compute_advantages(self.args.dara_method, torch.zeros(2, len(names)), [0, 0],
                               self.args.estimator_options(), lengths=dummy_lengths, channel_names=names)
        except ValueError as error:
            raise ValueError(f"DaraGRPOConfig with reward functions {names}: {error}") from error
        self._dara_gathered_rewards: torch.Tensor | None = None
        self.dara_last: BatchAdvantages | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL returns the matrix gathered from every process; keep it for the advantages.
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._dara_gathered_rewards = rewards
        return rewards

    def _generate_and_score_completions(self, inputs):
        self._dara_gathered_rewards = None
        output = super()._generate_and_score_completions(inputs)
        rewards = self._dara_gathered_rewards
        if rewards is None:
            raise RuntimeError("TRL's _generate_and_score_completions did not call _calculate_rewards; this TRL "
                               "version is not the one DaraGRPOTrainer was written for (1.16.0)")
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        if num_generations < 2:
            return output  # evaluation with one completion per prompt: no groups, TRL's zero advantages stay
        local_advantages = output["advantages"]
        lengths = None
        if self.args.dara_batch_norm == "token":
            loss_mask = output["completion_mask"]
            if output.get("tool_mask") is not None:
                loss_mask = loss_mask * output["tool_mask"]
            lengths = self.accelerator.gather(loss_mask.sum(dim=1)).cpu()
        computed = self.dara_step(rewards, lengths, num_generations)
        rows = process_slice(self.accelerator.process_index, local_advantages.shape[0], rewards.shape[0])
        output["advantages"] = computed.applied[rows].to(local_advantages.device, local_advantages.dtype)
        # TRL logged its own advantages of the whole batch last; show the ones the loss uses instead.
        logged = self._logs["advantages"]
        values = computed.applied.tolist()
        for offset in range(1, min(len(values), len(logged)) + 1):
            logged[-offset] = values[-offset]
        return output

    def dara_step(self, rewards: torch.Tensor, lengths: torch.Tensor | None, num_generations: int) -> BatchAdvantages:
        """Advantages of the gathered batch and their metrics into ``self._metrics`` (same on every process)."""
        computed = batch_advantages(self.args.dara_method, rewards, num_generations, self.args.estimator_options(),
                                    channel_names=self.reward_func_names, lengths=lengths)
        mode = "train" if self.model.training else "eval"
        for name, value in computed.metrics.items():
            self._metrics[mode][METRIC_PREFIX + name].append(value)
        self.dara_last = computed
        return computed

