"""ToolRL's tool-calling rewards (format, correctness) and the study's think-length channel.

Source: ToolRL `verl/utils/reward_score/rlla.py` with every variant flag off, as vendored by the DARA release
(the paper's tool-calling reward setup). The output format the model is taught, and that `render_answer` writes:

    <think>reasoning</think>
    <tool_call>
    {"name": "tool", "parameters": {"arg": 1}}
    {"name": "other", "parameters": {}}
    </tool_call>
    <response>text for the user</response>

with the tool-call block and the response block each optional. The ground truth is written in the same format;
its tags choose which template a response must follow.

Model output is data: it is read with `json` and regular expressions only, and every reward returns a score for
any string. The `*_outcome` functions return the same score with the reason a response could not be read
(`dara.rewards.outcome.RewardOutcome`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Literal

from dara.rewards.outcome import RewardOutcome

__all__ = [
    "CORRECTNESS_MAX",
    "CORRECTNESS_MIN",
    "MAX_JSON_DEPTH",
    "ToolCallParseError",
    "extract_response",
    "format_reward",
    "format_outcome",
    "correctness_reward",
    "correctness_outcome",
    "think_length_reward",
    "think_length_outcome",
    "decode_json",
    "parse_tool_calls",
    "render_answer",
    "multiset_jaccard",
]

ASSISTANT_START = "<|im_start|>assistant"
TURN_END = "<|im_end|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<response>", "</response>"
_ALL_TAGS = (THINK_OPEN, THINK_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE, RESPONSE_OPEN, RESPONSE_CLOSE)

CORRECTNESS_MAX = 3.0
CORRECTNESS_MIN = -3.0
# Deepest JSON nesting read from model output. Tool calls nest a few levels; Python's decoder gives up near its
# recursion limit (about 1000 levels, fewer on a deep call stack), so a fixed, lower limit makes the verdict on a
# line the same wherever it is scored (tiny trainer, verl reward worker, BFCL handler).
MAX_JSON_DEPTH = 100

# One anchored pattern per template (re.search with DOTALL, so `.` spans lines and `$` also accepts one final
# newline, exactly as ToolRL matches them), and the tags that must occur exactly once on top of the pattern.
_TEMPLATES: dict[tuple[bool, bool], tuple[re.Pattern[str], tuple[str, ...]]] = {
    # (ground truth has <tool_call>, ground truth has <response>)
    (False, True): (
        re.compile(r"^<think>.*?</think>\n<response>.*?</response>$", re.DOTALL),
        (RESPONSE_OPEN, RESPONSE_CLOSE),
    ),
    (True, False): (
        re.compile(r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>$", re.DOTALL),
        (TOOL_CALL_OPEN, TOOL_CALL_CLOSE),
    ),
    (True, True): (
        re.compile(r"^<think>.*?</think>\n<tool_call>\n.*?\n</tool_call>\n<response>.*?</response>$", re.DOTALL),
        (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, RESPONSE_OPEN, RESPONSE_CLOSE),
    ),
    (False, False): (re.compile(r"^<think>.*?</think>$", re.DOTALL), ()),
}


class ToolCallParseError(ValueError):
    """A tool-call block that cannot be read: a missing tag, a line that is not JSON, or a call without its keys."""


def _require_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def extract_response(text: str) -> str:
    """The assistant's reply out of a full decoded sequence.

    The text after the last `<|im_start|>assistant`, cut at the first `<|im_end|>` after it, stripped. Without
    the marker (tiny models use no chat template) the whole text is taken, still cut at `<|im_end|>`.
    """
    _require_str(text, "text")
    reply = text.rsplit(ASSISTANT_START, 1)[-1]
    return reply.split(TURN_END, 1)[0].strip()


def format_reward(response: str, ground_truth: str) -> float:
    """1.0 if the response follows the template the ground truth's tags select, else 0.0.

    Templates: response-only, tool-only, both (tool block then response block), neither (a think block only).
    The tags of the required blocks must each occur exactly once; the think tags are not counted (as in ToolRL).
    """
    _require_str(response, "response")
    _require_str(ground_truth, "ground_truth")
    template = (TOOL_CALL_OPEN in ground_truth, RESPONSE_OPEN in ground_truth)
    pattern, once_tags = _TEMPLATES[template]
    # The tag counts are checked before the pattern (ToolRL checks them after; the verdict is the same): with a
    # required tag repeated thousands of times the lazy pattern backtracks over every pair of them (minutes on
    # a megabyte), while with each required tag once it runs in linear time.
    if not all(response.count(tag) == 1 for tag in once_tags):
        return 0.0
    return 0.0 if pattern.search(response) is None else 1.0


def format_outcome(response: str, ground_truth: str) -> RewardOutcome:
    """`format_reward` as an outcome. Never a parse failure: judging the layout is this channel's reward."""
    return RewardOutcome(format_reward(response, ground_truth))


def think_length_outcome(response: str, max_words: int = 16) -> RewardOutcome:
    """`think_length_reward` with its parse failure: no `<think>`, or no `</think>` after the last one (0.0)."""
    _require_str(response, "response")
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 0:
        raise ValueError(f"max_words must be a non-negative int, got {max_words!r}")
    open_at = response.rfind(THINK_OPEN)
    if open_at < 0:
        return RewardOutcome.failure(0.0, f"no {THINK_OPEN} tag")
    body_start = open_at + len(THINK_OPEN)
    close_at = response.find(THINK_CLOSE, body_start)
    if close_at < 0:
        return RewardOutcome.failure(0.0, f"no {THINK_CLOSE} after the last {THINK_OPEN}")
    n_words = len(response[body_start:close_at].split())
    return RewardOutcome(1.0 if n_words <= max_words else 0.0)


def think_length_reward(response: str, max_words: int = 16) -> float:
    """1.0 iff a `<think>` ... `</think>` block closes and its last one holds at most `max_words` words.

    Words are whitespace-separated tokens between the last `<think>` and the next `</think>` (an empty block has
    0 words). Without a `</think>` after the last `<think>` the reward is 0.0.
    """
    return think_length_outcome(response, max_words).score


def _tool_call_lines(text: str, block: Literal["first", "last"]) -> list[str]:
    if TOOL_CALL_OPEN not in text:
        raise ToolCallParseError(f"no {TOOL_CALL_OPEN} tag")
    if TOOL_CALL_CLOSE not in text:
        raise ToolCallParseError(f"no {TOOL_CALL_CLOSE} tag")
    if block == "first":
        after_open = text.split(TOOL_CALL_OPEN, 1)[1]
    elif block == "last":
        after_open = text.rsplit(TOOL_CALL_OPEN, 1)[1]
    else:
        raise ValueError(f"block must be 'first' or 'last', got {block!r}")
    # As ToolRL: the block runs to the next closing tag (or to the end when the only one came earlier).
    return after_open.split(TOOL_CALL_CLOSE, 1)[0].strip().split("\n")


def _nests_deeper_than(value: Any, max_depth: int) -> bool:
    """Whether decoded JSON has lists/objects nested more than `max_depth` levels (iterative: no recursion)."""
    stack = [(value, 1)] if isinstance(value, (list, dict)) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (list, dict)))
    return False


def decode_json(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads` for model output: any text either decodes or raises ToolCallParseError saying why.

    Besides malformed JSON (`json.JSONDecodeError`), the decoder raises RecursionError for deep nesting and a plain
    ValueError for integers over Python's 4300-digit conversion limit; values nested more than `max_depth` levels
    are refused too (see `MAX_JSON_DEPTH`). `NaN`, `Infinity` and overflowing floats (`1e999` -> inf) decode as
    Python's json does.
    """
    _require_str(text, "text")
    try:
        value = json.loads(text)
    except RecursionError:
        raise ToolCallParseError(f"JSON nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as error:
        raise ToolCallParseError(f"not JSON: {error}") from error
    except ValueError as error:
        raise ToolCallParseError(f"undecodable JSON: {error}") from error
    # Nesting needs an opening bracket per level, so a line with few of them (every real call) skips the walk.
    if text.count("[") + text.count("{") > max_depth and _nests_deeper_than(value, max_depth):
        raise ToolCallParseError(f"JSON nested deeper than {max_depth} levels")
    return value


def parse_tool_calls(text: str, *, block: Literal["first", "last"] = "first") -> list[dict[str, Any]]:
    """The tool calls in a `<tool_call>` block, one JSON object per line, in order.

    Each call is returned as decoded: a dict with at least `"name"` (a JSON scalar) and, in ToolRL's format,
    `"parameters"`; `parameters` is checked by the reward only when it is compared (see `correctness_reward`).
    `block="first"` reads the first block (the training reward); `"last"` the last one (the BFCL handler).
    Both tags must occur somewhere in the text. Raises ToolCallParseError otherwise, for a blank line or one
    `decode_json` refuses (not JSON, nested deeper than `MAX_JSON_DEPTH`, an over-long integer), for a line that
    is not a JSON object, and for a call without a usable `"name"`.
    """
    _require_str(text, "text")
    calls = []
    for line_number, line in enumerate(_tool_call_lines(text, block), start=1):
        try:
            call = decode_json(line)
        except ToolCallParseError as error:
            raise ToolCallParseError(f"tool-call line {line_number} is {error}") from error
        if not isinstance(call, dict):
            raise ToolCallParseError(f"tool-call line {line_number} is a JSON {type(call).__name__}, not an object")
        if "name" not in call:
            raise ToolCallParseError(f"tool-call line {line_number} has no 'name' key")
        if not isinstance(call["name"], Hashable):
            # ToolRL counts names in a Counter; a list or object name fails there.
            raise ToolCallParseError(f"tool-call line {line_number} has a {type(call['name']).__name__} name")
        calls.append(call)
    return calls


def _parameters(call: Mapping[str, Any]) -> dict[str, Any]:
    if "parameters" not in call:
        raise ToolCallParseError(f"tool call {call.get('name')!r} has no 'parameters' key")
    parameters = call["parameters"]
    if not isinstance(parameters, dict):
        raise ToolCallParseError(f"tool call {call.get('name')!r} has parameters of type {type(parameters).__name__}")
    return parameters


def _ground_truth_calls(ground_truth: str) -> list[dict[str, Any]]:
    try:
        calls = parse_tool_calls(ground_truth)
        for call in calls:
            if not isinstance(call["name"], str):
                raise ToolCallParseError(f"ground-truth tool name {call['name']!r} is not a string")
            _parameters(call)
    except ToolCallParseError as error:
        raise ValueError(f"malformed ground truth: {error}") from error
    return calls


def multiset_jaccard(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """ToolRL's `match_score`: 1 if the lists are equal, 0 if either is empty, else multiset |a∩b| / |a∪b|."""
    if list(a) == list(b):
        return 1.0
    if not a or not b:
        return 0.0
    overlap = sum((Counter(a) & Counter(b)).values())
    return overlap / (len(a) + len(b) - overlap)


def _best_call_score(
    gt_call: Mapping[str, Any], predicted: Sequence[Mapping[str, Any]], used: set[int]
) -> tuple[float, int]:
    """The highest M(keys) + #exact values over unused same-name predictions; (0.0, -1) if none scores above 0."""
    gt_parameters = _parameters(gt_call)
    best_score, best_index = 0.0, -1
    for index, call in enumerate(predicted):
        if index in used or call["name"] != gt_call["name"]:
            continue
        parameters = _parameters(call)
        key_score = multiset_jaccard(list(gt_parameters), list(parameters))
        # ToolRL compares decoded JSON values with ==, so "5" != 5 but 1 == 1.0 (and True == 1).
        value_score = sum(1.0 for key, value in gt_parameters.items() if key in parameters and parameters[key] == value)
        if key_score + value_score > best_score:
            best_score, best_index = key_score + value_score, index
    return best_score, best_index


def _score_calls(gt_calls: list[dict[str, Any]], predicted: list[dict[str, Any]]) -> float:
    if gt_calls == predicted:
        return CORRECTNESS_MAX
    score = multiset_jaccard([call["name"] for call in gt_calls], [call["name"] for call in predicted])
    max_score = 1.0
    used: set[int] = set()
    for gt_call in gt_calls:  # greedy, in ground-truth order
        max_score += 1.0 + len(_parameters(gt_call))
        best_score, best_index = _best_call_score(gt_call, predicted, used)
        if best_index >= 0:
            used.add(best_index)
            score += best_score
    return (CORRECTNESS_MAX - CORRECTNESS_MIN) * score / max_score + CORRECTNESS_MIN


def correctness_outcome(response: str, ground_truth: str) -> RewardOutcome:
    """`correctness_reward` with its parse failure: the -3.0 of an unreadable first tool-call block, and why.

    A response that calls no tool when the ground truth does is a parse failure too (no `<tool_call>` tag): the
    reward cannot tell it from a garbled block.
    """
    _require_str(response, "response")
    _require_str(ground_truth, "ground_truth")
    if TOOL_CALL_OPEN not in ground_truth:
        return RewardOutcome(0.0)
    gt_calls = _ground_truth_calls(ground_truth)
    try:
        return RewardOutcome(_score_calls(gt_calls, parse_tool_calls(response)))
    except ToolCallParseError as error:
        return RewardOutcome.failure(CORRECTNESS_MIN, str(error))


def correctness_reward(response: str, ground_truth: str) -> float:
    """ToolRL's tool-call correctness in [-3, 3].

    0.0 when the ground truth calls no tool. -3.0 when the response's first tool-call block cannot be read
    (missing tag, non-JSON line, call without a name), or when a prediction compared with a ground-truth call of
    the same name lacks an object `parameters`. 3.0 when the decoded call lists are equal. Otherwise
    score = M(gt names, predicted names) + sum over ground-truth calls of the best unused same-name prediction's
    M(gt keys, predicted keys) + #(gt parameters with an equal predicted value), and the reward is
    6 * score / (1 + sum_gt (1 + #parameters)) - 3, with M the multiset Jaccard `multiset_jaccard`.
    Raises ValueError when the ground truth's own tool-call block is malformed.
    """
    return correctness_outcome(response, ground_truth).score


def _check_free_of_tags(text: str, what: str) -> None:
    found = [tag for tag in _ALL_TAGS if tag in text]
    if found:
        raise ValueError(f"{what} contains the tag(s) {found}; the rendered answer would not parse back")


def render_answer(
    think: str, calls: Sequence[Mapping[str, Any]] | None = None, response: str | None = None
) -> str:
    """A ToolRL answer text: `<think>..</think>`, then optionally the tool-call block, then optionally `<response>`.

    `calls` are dicts with a string `"name"` and an object `"parameters"` (other keys are kept), written one JSON
    line each; None means no tool-call block (an empty list is refused). Used for ground truths and scripted
    answers so that tasks, rewards and evaluation agree on the format.
    """
    _require_str(think, "think")
    _check_free_of_tags(think, "think")
    parts = [f"{THINK_OPEN}{think}{THINK_CLOSE}"]
    if calls is not None:
        if isinstance(calls, (str, bytes, Mapping)) or len(calls) == 0:
            raise ValueError("calls must be a non-empty sequence of tool-call dicts, or None for no tool-call block")
        lines = []
        for position, call in enumerate(calls):
            if not isinstance(call, Mapping):
                raise ValueError(f"call {position} is a {type(call).__name__}, not a dict")
            if not isinstance(call.get("name"), str):
                raise ValueError(f"call {position} needs a string 'name', got {call.get('name')!r}")
            if not isinstance(call.get("parameters"), Mapping):
                raise ValueError(f"call {position} needs a dict 'parameters', got {call.get('parameters')!r}")
            line = json.dumps(dict(call), ensure_ascii=False, allow_nan=False)
            _check_free_of_tags(line, f"call {position}")
            lines.append(line)
        parts.append(f"{TOOL_CALL_OPEN}\n" + "\n".join(lines) + f"\n{TOOL_CALL_CLOSE}")
    if response is not None:
        _require_str(response, "response")
        _check_free_of_tags(response, "response")
        parts.append(f"{RESPONSE_OPEN}{response}{RESPONSE_CLOSE}")
    return "\n".join(parts)
