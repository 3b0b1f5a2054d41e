"""Monitor mode for TRL: the density diagnostics of every generation batch, advantages untouched.

``DensityMonitorGRPOTrainer`` is TRL's ``GRPOTrainer`` with its own aggregation (``reward_weights``,
``multi_objective_aggregation``, ``scale_rewards`` as configured), plus, per generation batch, what
``dara diagnose`` reports offline (`dara.diagnose.batch_diagnostics`): each reward function's active-group density,
DARA's weight at that density and the share of the advantage energy every method of the table would give it, logged
under ``dara_monitor/`` next to TRL's metrics (so every ``report_to`` backend receives them)::

    trainer = DensityMonitorGRPOTrainer(model=..., reward_funcs=[format_reward, correctness_reward], args=GRPOConfig(...),
                                        train_dataset=..., monitor_w_max=5.0)

``DensityMonitorMixin`` adds the same to any ``GRPOTrainer`` subclass (``DaraGRPOTrainer`` included).

What the numbers are, and are not:

- A completion that any reward function left unscored (None: NaN in TRL's matrix, where TRL's own sum skips it)
  stays out of the diagnostics, and so does a group left with fewer than two scored completions;
  ``dara_monitor/scored_fraction`` says how many completions were used. A run whose reward functions return None
  by design (one per sub-task) is diagnosed only on the completions every function scored.
- The energy shares are the method table's methods with unit channel weights: ``energy_share_grpo`` is GRPO's split
  of the plain sum, not of TRL's ``reward_weights``-weighted or ``scale_rewards``-scaled aggregation.
- TRL averages logged metrics over ``logging_steps``; with 1, each logged value is one generation batch's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from trl import GRPOTrainer

from dara.advantages import W_MAX
from dara.diagnose import MONITOR_PREFIX, batch_diagnostics


def monitor_metrics(rewards: torch.Tensor, num_generations: int, names: Sequence[str], *, w_max: float = W_MAX,
                    static_weights: Sequence[float] | None = None) -> dict[str, float]:
    """`batch_diagnostics` of TRL's gathered ``rewards_per_func`` (rows ``[g * G, (g + 1) * G)`` are group g)."""
    rewards = torch.as_tensor(rewards).detach().to("cpu", torch.float64)
    groups = torch.arange(rewards.shape[0]) // num_generations
    scored = torch.isfinite(rewards).all(dim=1)
    per_group = torch.bincount(groups[scored], minlength=int(groups.max()) + 1 if len(groups) else 0)
    scored &= per_group[groups] >= 2
    out = {"scored_fraction": float(scored.to(torch.float64).mean()) if len(scored) else 0.0}
    if bool(scored.any()):
        out.update(batch_diagnostics(rewards[scored].numpy(), groups[scored].numpy(), names, w_max=w_max,
                                     static_weights=static_weights))
    return out


class DensityMonitorMixin:
    """Logs `monitor_metrics` of each generation batch; changes nothing that training uses."""

    def __init__(self, *args, monitor_w_max: float = W_MAX, monitor_static_weights: Sequence[float] | None = None,
                 **kwargs):
        super().__init__(*args, **kwargs)
        names = list(self.reward_func_names)
        if len(set(names)) != len(names):
            raise ValueError(f"reward functions need distinct names (they name the monitor's metrics), got {names}")
        self.monitor_w_max = monitor_w_max
        self.monitor_static_weights = None if monitor_static_weights is None else list(monitor_static_weights)
        # the options checked now, not at the first batch: the same computation on a two-group dummy batch
        monitor_metrics(torch.zeros(4, len(names)), 2, names, w_max=monitor_w_max,
                        static_weights=self.monitor_static_weights)
        self._monitor_rewards: torch.Tensor | None = None
        self.monitor_last: dict[str, float] | None = None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._monitor_rewards = rewards  # gathered from every process (TRL 1.16.0)
        return rewards

    def _generate_and_score_completions(self, inputs):
        self._monitor_rewards = None
        output = super()._generate_and_score_completions(inputs)
        if self._monitor_rewards is None:
            raise RuntimeError("TRL's _generate_and_score_completions did not call _calculate_rewards; the density "
                               "monitor was written for TRL 1.16.0")
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        if num_generations < 2:
            return output  # no groups to diagnose
        metrics = monitor_metrics(self._monitor_rewards, num_generations, list(self.reward_func_names),
                                  w_max=self.monitor_w_max, static_weights=self.monitor_static_weights)
        for name, value in metrics.items():
            self._metrics[mode][MONITOR_PREFIX + name].append(value)
        self.monitor_last = metrics
        return output


class DensityMonitorGRPOTrainer(DensityMonitorMixin, GRPOTrainer):
    """TRL's ``GRPOTrainer`` (its own advantages) with the density diagnostics logged under ``dara_monitor/``."""
