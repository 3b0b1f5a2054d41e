"""What every tiny task provides, and the hash split that keeps train and held-out items disjoint."""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple, Sequence

import numpy as np

SPLITS = ("train", "heldout")
# One item in ten is held out; the split is a function of the item's text, so no seed can leak one into the other.
HELDOUT_PERCENT = 10
# Draws in a row without a new item (at least; 100 per item found) after which `Task.items` takes the item space as
# spent: a failing request ends in a second, not after 200 draws per item asked for.
STALL_DRAWS = 20_000
# Prompts end with this line; the response follows it. Evaluation renders prompts the same way.
ASSISTANT_TURN = "Assistant:\n"


def split_of(key: str) -> str:
    """``"heldout"`` or ``"train"`` for an item whose identity (its prompt text) is ``key``."""
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def check_rate(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


class ScoredBatch(NamedTuple):
    """A batch's rewards and which of them are parse failures.

    ``rewards``: (N, K) float64, columns in ``reward_names`` order. ``parse_failures``: (N, K) bool, True where the
    response could not be read for that channel, which then holds the reward's failure value (see
    ``dara.rewards.outcome``; count them with ``dara.rewards.outcome.parse_failure_metrics``).
    """

    rewards: np.ndarray
    parse_failures: np.ndarray


class Task:
    """A prompt generator, a demonstration writer and a scorer for one reward structure.

    Subclasses set ``name`` and ``reward_names`` and implement ``_draw_item``, ``demonstration`` and
    ``score_outcomes``.
    Items are JSON-serialisable dicts with at least ``id`` and ``prompt``.
    """

    name: str = ""
    reward_names: tuple[str, ...] = ()

    def _draw_item(self, rng: np.random.Generator) -> dict[str, Any]:
        raise NotImplementedError

    def demonstration(self, item: dict[str, Any], rng: np.random.Generator) -> str:
        """A warm-start response for ``item``; its variants set the step-0 rate of each reward."""
        raise NotImplementedError

    def score_outcomes(self, responses: Sequence[str], items: Sequence[dict[str, Any]],
                       n_tokens: Sequence[int]) -> ScoredBatch:
        """Rewards of each response and which of them could not be read (``ScoredBatch``)."""
        raise NotImplementedError

    def score(self, responses: Sequence[str], items: Sequence[dict[str, Any]],
              n_tokens: Sequence[int]) -> np.ndarray:
        """Rewards of each response, shape (N, K) float64, columns in ``reward_names`` order."""
        return self.score_outcomes(responses, items, n_tokens).rewards

    def items(self, split: str, n: int, seed: int = 0) -> list[dict[str, Any]]:
        """``n`` distinct items of ``split``, the same list for the same (split, n, seed)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if n < 1:
            raise ValueError(f"n must be positive, got {n}")
        rng = np.random.default_rng([seed, SPLITS.index(split)])
        chosen: dict[str, dict[str, Any]] = {}
        # The item space is finite; give up (rather than loop forever) when it cannot supply n distinct items: after
        # 200 draws per item asked for, or once a long run of draws found nothing new (the space is, with high
        # probability, spent: the run grows with the items found, 100 each, as the last items of a space of M take
        # about 10 M draws when one draw in ten is held out). The items of a search that succeeds do not depend on
        # these bounds.
        fruitless = 0
        for _ in range(200 * n):
            item = self._draw_item(rng)
            if split_of(item["prompt"]) == split and item["prompt"] not in chosen:
                item["id"] = f"{self.name}-{split}-{seed}-{len(chosen)}"
                chosen[item["prompt"]] = item
                fruitless = 0
                if len(chosen) == n:
                    return list(chosen.values())
            else:
                fruitless += 1
                if fruitless >= max(STALL_DRAWS, 100 * len(chosen)):
                    break
        raise ValueError(f"task {self.name!r} has fewer than {n} distinct {split} items (found {len(chosen)})")

    def corpus(self, n_items: int, seed: int = 0) -> list[str]:
        """Prompt + demonstration texts of train items (tokenizer training and warm start)."""
        rng = np.random.default_rng([seed, 7])
        return [item["prompt"] + self.demonstration(item, rng) for item in self.items("train", n_items, seed)]
