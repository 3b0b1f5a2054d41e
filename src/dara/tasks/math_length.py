"""Arithmetic with a length budget (the study's math rewards, docs/rewards.md).

Problems ``a + b - c`` (single digits, non-negative result) answered with a short chain of steps and
``\\boxed{}``. Rewards: correctness {0, 1} by math-verify, and length {0, 1}: the response has at most
``length_budget`` tokens. The warm start learns answers padded with ``Check:`` lines (0 to ``max_checks``),
and only ``concise_rate`` of demonstrations have none. With ``hard_sum`` set (0 to 18), items whose first sum is
large (``a + b >= hard_sum``) are answered concisely in ``hard_concise_rate`` of their demonstrations instead (None:
at ``concise_rate`` too); ``hard_sum`` None, the default, makes no item hard. With a low ``hard_concise_rate``, once
training has taught the easy items to stay short, the violations left sit on those few items, so the length reward
becomes sparse only near saturation, as in the paper (R1-distilled models start at about 35 % compliance under the
4000-token budget, dense at G = 16, and the last violators are a tail of hard problems). ``slip_rate`` is the share of
demonstrations whose second step slips by one (``s - c = r + 1``, carried into the checks and the boxed answer): the
warm start then answers wrong at about that rate, so correctness has headroom and varies inside most groups, as a
base model's correctness does on problems it solves only sometimes; 0, the default, draws no slip.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dara.tasks.base import ASSISTANT_TURN, ScoredBatch, Task, check_rate


class MathLengthTask(Task):
    name = "math_length"
    reward_names = ("correctness", "length")

    def __init__(self, *, length_budget: int = 24, concise_rate: float = 0.1, max_checks: int = 3,
                 hard_sum: int | None = None, hard_concise_rate: float | None = None, slip_rate: float = 0.0):
        if length_budget < 1:
            raise ValueError(f"length_budget must be a positive number of tokens, got {length_budget}")
        if max_checks < 1:
            raise ValueError(f"max_checks must be >= 1, got {max_checks}")
        self.length_budget = int(length_budget)
        self.concise_rate = check_rate("concise_rate", concise_rate)
        self.max_checks = int(max_checks)
        if hard_sum is not None and not 0 <= hard_sum <= 18:
            raise ValueError(f"hard_sum must be None (no hard items) or in [0, 18] (a + b of single digits), "
                             f"got {hard_sum}")
        if hard_sum is None and hard_concise_rate is not None:
            raise ValueError("hard_concise_rate needs hard_sum (which items are hard)")
        self.hard_sum = None if hard_sum is None else int(hard_sum)
        # None: hard items are answered like the others
        self.hard_concise_rate = self.concise_rate if hard_concise_rate is None else check_rate(
            "hard_concise_rate", hard_concise_rate)
        self.slip_rate = check_rate("slip_rate", slip_rate)

    def _draw_item(self, rng: np.random.Generator) -> dict[str, Any]:
        a, b = (int(x) for x in rng.integers(0, 10, size=2))
        c = int(rng.integers(0, min(a + b, 9) + 1))
        answer = a + b - c
        return {
            "prompt": f"Problem: {a} + {b} - {c}\n{ASSISTANT_TURN}",
            "operands": [a, b, c],
            "answer": str(answer),
        }

    def demonstration(self, item: dict[str, Any], rng: np.random.Generator) -> str:
        a, b, c = item["operands"]
        hard = self.hard_sum is not None and a + b >= self.hard_sum
        concise_rate = self.hard_concise_rate if hard else self.concise_rate
        if rng.random() < concise_rate:
            n_checks = 0
        else:
            n_checks = int(rng.integers(1, self.max_checks + 1))
        # Drawn last and only when slips are on, so a task without them writes the demonstrations it always wrote.
        slipped = self.slip_rate > 0 and rng.random() < self.slip_rate
        written = str(int(item["answer"]) + 1) if slipped else item["answer"]
        steps = f"{a} + {b} = {a + b}. {a + b} - {c} = {written}."
        checks = "".join(f" Check: {a + b} - {c} = {written}." for _ in range(n_checks))
        return f"{steps}{checks} \\boxed{{{written}}}"

    def score_outcomes(self, responses: Sequence[str], items: Sequence[dict[str, Any]],
                       n_tokens: Sequence[int]) -> ScoredBatch:
        from dara.rewards import math as math_rewards

        if not len(responses) == len(items) == len(n_tokens):
            raise ValueError(f"{len(responses)} responses, {len(items)} items, {len(n_tokens)} token counts")
        correct = math_rewards.correctness_outcomes(list(responses), [item["answer"] for item in items])
        length = [math_rewards.length_reward(int(n), self.length_budget) for n in n_tokens]
        rewards = np.column_stack([np.asarray([outcome.score for outcome in correct], dtype=np.float64),
                                   np.asarray(length, dtype=np.float64)])
        # The length channel reads a token count, never the text, so it cannot fail to parse.
        failures = np.column_stack([np.asarray([outcome.failed for outcome in correct], dtype=bool),
                                    np.zeros(len(length), dtype=bool)])
        return ScoredBatch(rewards.reshape(len(responses), 2), failures.reshape(len(responses), 2))
