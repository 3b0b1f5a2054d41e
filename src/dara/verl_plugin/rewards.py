"""verl ``custom_reward_function`` entry points for the study's tasks, and a reward manager for the token count.

verl calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`` once per
response; a returned dict puts every key into ``reward_extra_info`` (one column per key, which the DARA trainer
reads as reward channels) and ``score`` into the token-level reward. Wiring, e.g. for tool calling::

    reward.custom_reward_function.path=pkg://dara.verl_plugin.rewards
    reward.custom_reward_function.name=compute_toolcall_score
    +reward.custom_reward_function.reward_kwargs.with_think_length=true   # the 3-reward study

Math needs the response's token count, which verl's naive reward manager does not pass on; select
`TokenCountRewardManager` (``reward.reward_manager.source=importlib``,
``reward.reward_manager.module.path=pkg://dara.verl_plugin.rewards``,
``reward.reward_manager.name=TokenCountRewardManager``), which adds ``extra_info["valid_response_length"]``.

Every sample returns the same keys (verl requires it). ``score`` is the plain sum of the channels, which is what
GRPO optimises and what DAPO's ``filter_groups.metric=reward`` filters on. Beside each channel ``<channel>``, the
key ``parse_failure/<channel>`` is 1.0 when the response could not be read for it (the channel then holds its
failure value, see ``dara.rewards.outcome``), else 0.0; the ``dara_sync`` trainer sums them per step into the
metric ``dara/reward_parse_failures/<channel>`` (`parse_failure_metrics_from_extra_fields`), which
``dara.verl_backend.logs`` turns into the tiny scale's column ``reward_parse_failures/<channel>``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np

from dara.advantages import METRIC_PREFIX
from dara.rewards import toolrl
from dara.rewards.outcome import PARSE_FAILURE_METRIC_PREFIX, RewardOutcome

VALID_RESPONSE_LENGTH = "valid_response_length"
TOOLCALL3_KEYS = ("format", "correctness", "think_length")
PARSE_FAILURE_KEY_PREFIX = "parse_failure/"


def _scored(outcomes: dict[str, RewardOutcome]) -> dict[str, float]:
    """verl's dict: ``score`` (the sum), each channel, and each channel's parse-failure flag."""
    result = {"score": float(sum(outcome.score for outcome in outcomes.values()))}
    result.update({name: float(outcome.score) for name, outcome in outcomes.items()})
    result.update({f"{PARSE_FAILURE_KEY_PREFIX}{name}": float(outcome.failed) for name, outcome in outcomes.items()})
    return result


def parse_failure_metrics_from_extra_fields(extra_fields, reward_keys) -> dict[str, float]:
    """``{"dara/reward_parse_failures/<key>": count}`` for one step, out of the rollout's per-sample
    ``extra_fields`` (each holding the ``reward_extra_info`` dict our reward function returned; read as in
    ``dara.verl_plugin.trainer.reward_extra_columns``). Named like the DARA trainer's other metrics (``dara/``).

    A reward function that does not report ``parse_failure/<key>`` (one not from this module) adds no metric for
    that key, rather than a count of zero that was never measured.
    """
    rows = extra_fields.tolist() if hasattr(extra_fields, "tolist") else list(extra_fields)
    infos = [getattr(row, "data", row) for row in rows]
    infos = [row.get("reward_extra_info") for row in infos if isinstance(row, dict)]
    counts: dict[str, float] = {}
    for key in reward_keys:
        flag_key = f"{PARSE_FAILURE_KEY_PREFIX}{key}"
        flags = [info[flag_key] for info in infos if isinstance(info, dict) and flag_key in info]
        if flags:
            counts[f"{METRIC_PREFIX}{PARSE_FAILURE_METRIC_PREFIX}{key}"] = float(sum(float(flag) for flag in flags))
    return counts


def compute_toolcall_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    with_think_length: bool = False,
    max_words: int = 16,
    **unused: Any,
) -> dict[str, float]:
    """ToolRL rewards of one response: format {0,1}, correctness [-3,3], optionally think_length {0,1}."""
    response = toolrl.extract_response(solution_str)
    outcomes = {
        "format": toolrl.format_outcome(response, ground_truth),
        "correctness": toolrl.correctness_outcome(response, ground_truth),
    }
    if with_think_length:
        outcomes["think_length"] = toolrl.think_length_outcome(response, max_words=max_words)
    return _scored(outcomes)


def compute_math_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    budget: int = 4000,
    timeout_s: float = 5.0,
    **unused: Any,
) -> dict[str, float]:
    """Math rewards of one response: correctness {0,1} (last boxed answer, math-verify), length 1[tokens <= budget]."""
    from dara.rewards import math as math_rewards

    if not extra_info or VALID_RESPONSE_LENGTH not in extra_info:
        raise KeyError(
            f"compute_math_score needs extra_info[{VALID_RESPONSE_LENGTH!r}] (the response's token count); select "
            "reward.reward_manager.name=TokenCountRewardManager from pkg://dara.verl_plugin.rewards"
        )
    n_tokens = int(extra_info[VALID_RESPONSE_LENGTH])
    outcomes = {
        "correctness": math_rewards.correctness_outcome(solution_str, str(ground_truth), timeout_s=timeout_s),
        "length": RewardOutcome(math_rewards.length_reward(n_tokens, budget=budget)),
    }
    return _scored(outcomes)


@lru_cache(maxsize=16)
def _tiny_task(task_name: str, options_json: str):
    from dara.tasks import get_task

    return get_task(task_name, **json.loads(options_json))


def compute_tiny_task_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                            **unused: Any) -> dict[str, float]:
    """A tiny task's rewards of one response (the verl CPU scale), scored by the task's own ``score_outcomes``:
    each channel under its name, their sum as ``score``, and each channel's parse-failure flag."""
    extra_info = extra_info or {}
    for key in ("task", "task_options", VALID_RESPONSE_LENGTH):
        if key not in extra_info:
            raise KeyError(
                f"compute_tiny_task_score needs extra_info[{key!r}]: make the data with dara.verl_backend.tiny_data "
                "and select reward.reward_manager.name=TokenCountRewardManager (token_count_reward_manager: true)"
            )
    task = _tiny_task(str(extra_info["task"]), str(extra_info["task_options"]))
    scored = task.score_outcomes([solution_str], [json.loads(ground_truth)], [int(extra_info[VALID_RESPONSE_LENGTH])])
    outcomes = {name: RewardOutcome(float(scored.rewards[0, k]),
                                    "unreadable" if scored.parse_failures[0, k] else None)
                for k, name in enumerate(task.reward_names)}
    return _scored(outcomes)


def _token_count_manager():
    """Build the reward manager class lazily: verl's reward loop is heavy to import."""
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    class TokenCountRewardManager(NaiveRewardManager):
        """verl's naive reward manager, plus the response's valid token count in ``extra_info``."""

        async def run_single(self, data):
            data = data[-1:]
            item = data[0]
            response_width = item.batch["responses"].shape[-1]
            n_tokens = int(item.batch["attention_mask"][-response_width:].sum())
            extra = dict(item.non_tensor_batch.get("extra_info") or {})
            extra[VALID_RESPONSE_LENGTH] = n_tokens
            column = np.empty(1, dtype=object)
            column[0] = extra
            data.non_tensor_batch["extra_info"] = column
            return await super().run_single(data)

    TokenCountRewardManager.__module__ = __name__
    return TokenCountRewardManager


def __getattr__(name: str):
    if name == "TokenCountRewardManager":
        cls = _token_count_manager()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
