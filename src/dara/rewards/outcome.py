"""What a reward saw in one response: its score, and why the response could not be read when it could not.

Reward functions are a boundary where the input is written by a model, so every one returns a score for any string.
A response a channel cannot read (no block where the channel looks, JSON that does not decode, an answer math-verify
cannot parse, a scoring timeout) scores the channel's documented failure value; the `*_outcome` functions of
`dara.rewards.toolrl`, `dara.rewards.math` and `dara.rewards.act` return that score together with the reason, so a
trainer can count failures per channel instead of mistaking them for wrong answers. The float-returning reward
functions are the `.score` of these outcomes.

Counting, for any trainer (the tiny trainer, the verl plugin, a TRL integration):

    from dara.rewards.outcome import parse_failure_metrics
    scored = task.score_outcomes(responses, items, n_tokens)        # rewards (N, K), parse_failures (N, K) bool
    metrics.update(parse_failure_metrics(task.reward_names, scored.parse_failures))
    # {"reward_parse_failures/format": 0.0, "reward_parse_failures/correctness": 3.0, ...}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PARSE_FAILURE_METRIC_PREFIX", "RewardOutcome", "parse_failure_metrics"]

PARSE_FAILURE_METRIC_PREFIX = "reward_parse_failures/"
# A reason quotes what the parser said about the text; model text can be megabytes, so reasons are cut to this.
MAX_REASON_CHARS = 200


@dataclass(frozen=True)
class RewardOutcome:
    """One channel's reward for one response.

    `score` is the reward; `parse_failure` is None when the response was read, else a short description of what
    could not be read, and then `score` is the channel's failure value.
    """

    score: float
    parse_failure: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.score, bool) or not isinstance(self.score, (int, float)):
            raise TypeError(f"score must be a float, got {type(self.score).__name__}")
        if self.parse_failure is not None and not isinstance(self.parse_failure, str):
            raise TypeError(f"parse_failure must be a str or None, got {type(self.parse_failure).__name__}")

    @property
    def failed(self) -> bool:
        return self.parse_failure is not None

    @classmethod
    def failure(cls, score: float, reason: str) -> "RewardOutcome":
        """The failure value `score`, with `reason` cut to `MAX_REASON_CHARS` characters."""
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 3] + "..."
        return cls(float(score), reason)


def parse_failure_metrics(channel_names: Sequence[str], parse_failures) -> dict[str, float]:
    """`{"reward_parse_failures/<channel>": number of responses whose channel could not be read}` for one step.

    `parse_failures` is an (N, K) boolean array (or nested lists), one column per name in `channel_names`.
    """
    import numpy as np  # here, not at the top: the reward modules import this one and stay free of numpy

    failures = np.asarray(parse_failures)
    names = list(channel_names)
    if failures.ndim != 2 or failures.shape[1] != len(names):
        raise ValueError(f"parse_failures must have shape (N, {len(names)}) for channels {names}, got {failures.shape}")
    if failures.size and failures.dtype != np.bool_:
        raise TypeError(f"parse_failures must be booleans, got dtype {failures.dtype}")
    return {f"{PARSE_FAILURE_METRIC_PREFIX}{name}": float(failures[:, k].sum()) for k, name in enumerate(names)}
