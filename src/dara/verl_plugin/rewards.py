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
GRPO optimises and what DAPO's ``filter_groups.metric=reward`` filters on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dara.rewards import toolrl

VALID_RESPONSE_LENGTH = "valid_response_length"
TOOLCALL_KEYS = ("format", "correctness")
TOOLCALL3_KEYS = ("format", "correctness", "think_length")
MATH_KEYS = ("correctness", "length")


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
    components = {
        "format": toolrl.format_reward(response, ground_truth),
        "correctness": toolrl.correctness_reward(response, ground_truth),
    }
    if with_think_length:
        components["think_length"] = toolrl.think_length_reward(response, max_words=max_words)
    return {"score": float(sum(components.values())), **components}


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
    components = {
        "correctness": math_rewards.correctness_reward(solution_str, str(ground_truth), timeout_s=timeout_s),
        "length": math_rewards.length_reward(n_tokens, budget=budget),
    }
    return {"score": float(sum(components.values())), **components}


def compute_tiny_task_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                            **kwargs: Any) -> dict[str, float]:
    """A tiny task's rewards (`dara.verl_plugin.tiny_data.compute_tiny_task_score`), for the verl CPU scale."""
    from dara.verl_plugin.tiny_data import compute_tiny_task_score as score

    return score(data_source, solution_str, ground_truth, extra_info, **kwargs)


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
