"""Agentic Critical Training's critic choice (its composite reward: docs/rewards.md).

A household state, a goal, and two candidate actions shown as "Action 1" / "Action 2" in random order: the
expert's action and an admissible but worse one. The answer names the chosen action inside ``<action>...</action>``.
Rewards (ACT's composite, one channel each): accuracy 1.0 for the expert action, admissible 0.1 for another
admissible action, format 0 with the tag and -0.5 without (then the action is empty and the other two are 0).
The warm start writes the tag in only ``tag_rate`` of demonstrations (else ``Action: ...``), so every channel
starts sparse and format is the gate.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from dara.tasks.base import ASSISTANT_TURN, ScoredBatch, Task, check_rate

ROOMS = ["kitchen", "office", "garden", "bedroom", "hall", "garage"]
OBJECTS = ["mug", "key", "book", "lamp", "ball", "phone", "apple", "coin"]


class ActCriticTask(Task):
    name = "act_critic"
    reward_names = ("accuracy", "admissible", "format")

    def __init__(self, *, tag_rate: float = 0.1, objects_in_view: int = 2):
        if not 1 <= objects_in_view < len(OBJECTS):
            raise ValueError(f"objects_in_view must be in [1, {len(OBJECTS) - 1}], got {objects_in_view}")
        self.tag_rate = check_rate("tag_rate", tag_rate)
        self.objects_in_view = objects_in_view

    def _draw_item(self, rng: np.random.Generator) -> dict[str, Any]:
        here, there = (ROOMS[i] for i in rng.choice(len(ROOMS), size=2, replace=False))
        goal = OBJECTS[int(rng.integers(len(OBJECTS)))]
        goal_room = here if rng.random() < 0.5 else there
        others = [o for o in OBJECTS if o != goal]
        seen = [others[i] for i in rng.choice(len(others), size=self.objects_in_view, replace=False)]
        if goal_room == here:
            seen[int(rng.integers(len(seen)))] = goal
        admissible = [f"go to {room}" for room in ROOMS if room != here] + [f"take {obj}" for obj in seen]
        expert = f"take {goal}" if goal_room == here else f"go to {goal_room}"
        negatives = [action for action in admissible if action != expert]
        negative = negatives[int(rng.integers(len(negatives)))]
        shown = [expert, negative] if rng.random() < 0.5 else [negative, expert]
        prompt = (f"You are in the {here}. You see: {', '.join(seen)}. Goal: get the {goal}. "
                  f"The {goal} is in the {goal_room}.\nAction 1: {shown[0]}\nAction 2: {shown[1]}\n{ASSISTANT_TURN}")
        return {
            "prompt": prompt,
            "expert_action": expert,
            "admissible_actions": admissible,
            "shown_actions": shown,
            "goal_room": goal_room,
            "goal": goal,
        }

    def demonstration(self, item: dict[str, Any], rng: np.random.Generator) -> str:
        reason = f"The {item['goal']} is in the {item['goal_room']}."
        if rng.random() < self.tag_rate:
            return f"{reason} <action>{item['expert_action']}</action>"
        return f"{reason} Action: {item['expert_action']}"

    def score_outcomes(self, responses: Sequence[str], items: Sequence[dict[str, Any]],
                       n_tokens: Sequence[int]) -> ScoredBatch:
        from dara.rewards import act

        if len(responses) != len(items):
            raise ValueError(f"{len(responses)} responses for {len(items)} items")
        rows, failures = [], []
        for response, item in zip(responses, items):
            (accuracy, admissible, fmt, _total), parse_failure = act.composite_outcome(
                response, item["expert_action"], item["admissible_actions"])
            rows.append([accuracy, admissible, fmt])
            # Without an action the semantic channels are unread; format's -0.5 is its verdict on the tag.
            unread = parse_failure is not None
            failures.append([unread, unread, False])
        return ScoredBatch(np.asarray(rows, dtype=np.float64).reshape(len(responses), 3),
                           np.asarray(failures, dtype=bool).reshape(len(responses), 3))
