"""Small synthetic tasks that mirror the study's reward structures (docs/rewards.md, docs/tiny_scale.md).

Every task is deterministic from a seed, has disjoint ``train`` and ``heldout`` splits, renders short prompts for
the tiny policy, writes warm-start demonstrations, and scores responses with the project's reward functions
(``dara.rewards``). The demonstrations decide how often the warm-started policy satisfies each reward at step 0:
a sparse reward is one the demonstrations rarely satisfy (a near-miss of the format, a verbose answer), so the
density imbalance that DARA targets is present from the first step, as in the paper.

    from dara.tasks import get_task
    task = get_task("toolcall", seed=0)
    items = task.items("train", 64)
    rewards = task.score(responses, items, n_tokens)   # (N, K) float array, columns task.reward_names
    scored = task.score_outcomes(responses, items, n_tokens)  # the same rewards, and (N, K) parse failures
"""

from __future__ import annotations

from dara.tasks.base import ScoredBatch, Task, split_of
from dara.tasks.act_critic import ActCriticTask
from dara.tasks.math_length import MathLengthTask
from dara.tasks.toolcall import ToolCallTask

TASK_CLASSES: dict[str, type[Task]] = {
    "toolcall": ToolCallTask,
    "toolcall3": ToolCallTask,
    # toolcall with another calibration: the denser-regime comparison's task (its own name, so its warm starts,
    # runs and tables stay apart from toolcall's)
    "toolcall_dense": ToolCallTask,
    "math_length": MathLengthTask,
    "act_critic": ActCriticTask,
}
TASK_NAMES = tuple(TASK_CLASSES)


def get_task(name: str, **settings) -> Task:
    """The task called ``name`` with its settings (the experiment file's ``tasks.<name>`` block)."""
    if name not in TASK_CLASSES:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(TASK_NAMES)}")
    if name == "toolcall3":
        settings.setdefault("three_rewards", True)
    task = TASK_CLASSES[name](**settings)
    task.name = name  # a variant of a class answers to its own name (item ids, the evaluation's task checks)
    return task


__all__ = ["ScoredBatch", "Task", "TASK_NAMES", "get_task", "split_of"]
