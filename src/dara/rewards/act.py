"""The composite action reward of Agentic Critical Training (ACT), the second seed's task.

Source: Agentic Critical Training's composite reward for action choice.

R = R_acc + R_adm + R_fmt for the action a in the response's last `<action>...</action>` and the expert action a+:
R_acc = 1.0 if a matches a+; R_adm = 0.1 if it does not but a is admissible (0 for an open action space);
R_fmt = 0 when the tag is present, -0.5 when it is not (then a is empty and both semantic parts are 0).
Actions are compared after `normalize_action`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

__all__ = [
    "ACCURACY_REWARD",
    "ADMISSIBLE_REWARD",
    "MISSING_TAG_PENALTY",
    "ActReward",
    "ActOutcome",
    "normalize_action",
    "extract_action",
    "composite",
    "composite_outcome",
]

ACCURACY_REWARD = 1.0
ADMISSIBLE_REWARD = 0.1
MISSING_TAG_PENALTY = -0.5

_WHITESPACE = re.compile(r"\s+")
_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")


class ActReward(NamedTuple):
    accuracy: float
    admissible: float
    format: float
    total: float


class ActOutcome(NamedTuple):
    """The composite reward and, when the response has no `<action>` block, why: then accuracy and admissible
    score 0 unread (parse failures of those channels) and format takes its -0.5 penalty (its verdict, not a
    failure)."""

    reward: ActReward
    parse_failure: str | None


def normalize_action(text: str) -> str:
    """Casefolded, internal whitespace collapsed to single spaces, stripped: the one place actions are normalised."""
    if not isinstance(text, str):
        raise TypeError(f"action must be a str, got {type(text).__name__}")
    return _WHITESPACE.sub(" ", text.casefold()).strip()


def extract_action(response: str, tag: str = "action") -> str | None:
    """The stripped text of the last `<tag>...</tag>` in the response (spanning lines), or None without one.

    A block runs from an opening tag to the next closing tag, with no other opening tag in between.
    """
    if not isinstance(response, str):
        raise TypeError(f"response must be a str, got {type(response).__name__}")
    if not isinstance(tag, str) or _TAG_NAME.fullmatch(tag) is None:
        raise ValueError(f"tag must be a plain tag name such as 'action', got {tag!r}")
    opening, closing = re.escape(f"<{tag}>"), re.escape(f"</{tag}>")
    blocks = re.findall(rf"{opening}((?:(?!{opening}).)*?){closing}", response, flags=re.DOTALL)
    return blocks[-1].strip() if blocks else None


def composite(response: str, expert_action: str, admissible_actions: Iterable[str] | None = None) -> ActReward:
    """ACT's reward for one response; `admissible_actions=None` means an open action space (no admissible bonus)."""
    return composite_outcome(response, expert_action, admissible_actions).reward


def composite_outcome(
    response: str, expert_action: str, admissible_actions: Iterable[str] | None = None
) -> ActOutcome:
    """`composite`, with the parse failure of a response that has no closed `<action>` block."""
    expert = normalize_action(expert_action)
    if not expert:
        raise ValueError("expert_action is empty after normalisation")
    admissible: set[str] | None = None
    if admissible_actions is not None:
        if isinstance(admissible_actions, str):
            raise TypeError("admissible_actions must be a collection of actions, not a single string")
        admissible = {normalize_action(action) for action in admissible_actions}
    action = extract_action(response)
    if action is None:
        missing = ActReward(accuracy=0.0, admissible=0.0, format=MISSING_TAG_PENALTY, total=MISSING_TAG_PENALTY)
        return ActOutcome(missing, "no closed <action> block")
    chosen = normalize_action(action)
    accuracy = ACCURACY_REWARD if chosen == expert else 0.0
    admissible_bonus = ADMISSIBLE_REWARD if (not accuracy and admissible is not None and chosen in admissible) else 0.0
    reward = ActReward(accuracy=accuracy, admissible=admissible_bonus, format=0.0, total=accuracy + admissible_bonus)
    return ActOutcome(reward, None)
