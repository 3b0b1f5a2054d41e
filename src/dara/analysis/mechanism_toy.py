"""A mechanism toy: why a density-aware weight speeds up a sparse reward, in seconds on a CPU.

The "policy" is a vector of independent per-reward success probabilities ``p_k = c_k * sigmoid(theta_k)``,
where the ceiling ``c_k`` keeps the dense reward from saturating (as correctness does not in the paper;
a saturated dense reward has zero density and leaves the sparse one alone in the batch).
Each step samples ``responses_per_step`` responses in groups of ``G`` (a fixed response budget, as the
paper's group-size ablation keeps 2048 responses per step), draws reward k ~ Bernoulli(p_k), computes
each method's advantages with :func:`dara.advantages.compute_advantages` and takes one policy-gradient
step: ``theta_k += lr * mean_i(loss_weight_i * A_i * d log P(r_ik) / d theta_k)``. One reward is dense
(starts at 30 % with a 60 % ceiling), the other sparse (starts at 1 %): only groups
where some response succeeds carry signal for it, so its density pi is small and GDPO's sum of z-scores,
once normalised over the batch, gives it a small share of the update. DARA multiplies it by
``min(w_max, sqrt(pi_ref / pi))``.

Run it: ``python -m dara.analysis.mechanism_toy --out results/toy.csv`` (see ``analysis/toy.py`` for the figure).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    import torch

# torch and the estimators are imported where the toy runs: REPORT.md's job reads ToyConfig's defaults only, and
# importing torch would add seconds to the last job of the pipeline.

TOY_METHODS = ("grpo", "gdpo", "dvao", "gd2po_hard", "dara_sym", "dara_asym")


@dataclass(frozen=True)
class ToyConfig:
    """One toy run.

    method: an estimator name from ``dara.advantages.METHODS`` (static methods need ``static_weights``).
    group_size: responses per prompt group (G).
    seed: seeds the reward draws.
    initial_success: starting success probability of each reward (dense first, sparse second).
    ceiling: the highest success probability each reward can reach.
    responses_per_step: responses per step, split into ``responses_per_step // group_size`` groups.
    learning_rate: step size on the logits.
    threshold: success probability of ``target_reward`` that counts as "reached".
    max_steps: the run stops here; a run that never reaches the threshold is censored at this step.
    target_reward: which reward's threshold the run waits for (the sparse one).
    """

    method: str
    group_size: int
    seed: int
    initial_success: tuple[float, ...] = (0.3, 0.01)
    ceiling: tuple[float, ...] = (0.6, 1.0)
    responses_per_step: int = 256
    learning_rate: float = 0.5
    threshold: float = 0.8
    max_steps: int = 300
    target_reward: int = 1
    static_weights: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.group_size < 2 or self.responses_per_step % self.group_size:
            raise ValueError(
                f"group_size must be >= 2 and divide responses_per_step={self.responses_per_step}, got {self.group_size}"
            )
        if len(self.ceiling) != len(self.initial_success):
            raise ValueError(f"ceiling has {len(self.ceiling)} entries, initial_success {len(self.initial_success)}")
        if not all(0.0 < p < c <= 1.0 for p, c in zip(self.initial_success, self.ceiling)):
            raise ValueError(
                f"need 0 < initial_success < ceiling <= 1 per reward, got {self.initial_success} and {self.ceiling}"
            )
        if not 0 <= self.target_reward < len(self.initial_success):
            raise ValueError(f"target_reward {self.target_reward} is not one of {len(self.initial_success)} rewards")


def bernoulli_score(rewards: torch.Tensor, logits: torch.Tensor, ceiling: torch.Tensor) -> torch.Tensor:
    """d/dtheta log P(r) for r ~ Bernoulli(c * sigmoid(theta)), elementwise; r - sigmoid(theta) when c = 1.

    Shapes: rewards (N, K); logits and ceiling (K,). Returns (N, K).
    """
    import torch

    sigma = torch.sigmoid(logits)
    success = ceiling * sigma
    return rewards * (1 - sigma) - (1 - rewards) * success * (1 - sigma) / (1 - success)


def run_toy(config: ToyConfig) -> pd.DataFrame:
    """Train the toy policy; one row per step with each reward's success probability and DARA's diagnostics.

    Stops at the first step whose target success probability reaches the threshold, or at ``max_steps``.
    """
    import torch

    from dara.advantages import compute_advantages

    generator = torch.Generator().manual_seed(config.seed)
    ceiling = torch.tensor(config.ceiling, dtype=torch.float64)
    logits = torch.logit(torch.tensor(config.initial_success, dtype=torch.float64) / ceiling)
    n_groups = config.responses_per_step // config.group_size
    index = torch.arange(n_groups).repeat_interleave(config.group_size)
    rows = []
    for step in range(1, config.max_steps + 1):
        success = ceiling * torch.sigmoid(logits)
        rewards = torch.bernoulli(success.expand(config.responses_per_step, -1), generator=generator)
        result = compute_advantages(config.method, rewards, index, static_weights=config.static_weights)
        advantages = result.advantages.to(torch.float64) * result.loss_weights.to(torch.float64)
        gradient = (advantages[:, None] * bernoulli_score(rewards, logits, ceiling)).mean(dim=0)
        logits = logits + config.learning_rate * gradient
        success = ceiling * torch.sigmoid(logits)
        row = {"step": step}
        for k in range(len(config.initial_success)):
            row[f"success/{k}"] = float(success[k])
            row[f"density/{k}"] = float(result.density[k])
            row[f"weight/{k}"] = float(result.weights[k])
        rows.append(row)
        if success[config.target_reward] >= config.threshold:
            break
    return pd.DataFrame(rows)


def steps_to_threshold(
    methods: Sequence[str] = TOY_METHODS,
    group_sizes: Sequence[int] = (4, 8, 16, 32),
    seeds: Sequence[int] = (0, 1, 2),
    **overrides,
) -> pd.DataFrame:
    """Run the toy for every method x group size x seed.

    Returns one row per run: method, G, seed, step (the step the target reward reached the threshold,
    or the censoring step), reached (bool).
    """
    records = []
    for method in methods:
        for group_size in group_sizes:
            for seed in seeds:
                config = ToyConfig(method=method, group_size=group_size, seed=seed, **overrides)
                trace = run_toy(config)
                final = trace.iloc[-1]
                reached = bool(final[f"success/{config.target_reward}"] >= config.threshold)
                records.append(
                    {"method": method, "G": group_size, "seed": seed, "step": int(final["step"]), "reached": reached}
                )
    return pd.DataFrame(records)


def main(argv=None) -> None:
    from dara.io import write_csv_atomic

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="CSV of steps to threshold per method, G and seed")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    write_csv_atomic(args.out, steps_to_threshold(seeds=range(args.seeds)))


if __name__ == "__main__":
    main()
