"""Model output can never crash a run: every reward and output decoder of the training and evaluation paths returns
a value inside its documented range, fast, for any string (issue #13).

Covered: ToolRL format / correctness / think-length and their outcomes, `extract_response`, `parse_tool_calls`;
math correctness (workers) and length, `last_boxed`; the ACT composite; the tasks' `score_outcomes` (the tiny
trainer's rewards) and the tiny evaluation's `task_metrics`; the verl entry points; the BFCL decoder
(`decode_calls`, `format_score`, the per-case means) and, in the .venv-bfcl environment, the bfcl-eval handler's
`decode_ast` / `decode_execute`; the held-out math evaluation's numeric fallback.

Inputs: a fixed corpus of hostile outputs (deep JSON / LaTeX / tag nesting, a megabyte of text, thousands of
repeated tags, truncated blocks, NUL bytes and lone surrogates, numbers that overflow) and hypothesis-generated
strings stitched from the same fragments and arbitrary unicode. A non-string input raises TypeError.

Time limits: `PER_CALL_LIMIT_S` per call on any corpus entry (up to a megabyte), and hypothesis's `deadline` per
generated example. Measured on the shared 2-core machine, the slowest call on a megabyte is well under 0.5 s; the
limit leaves room for a loaded machine while still failing on the quadratic cases this suite was written
against (minutes each). Math correctness runs in worker processes with its own wall-clock limit per item.

Only names that already existed before the issue are imported at module level, so the nested-JSON tests can be
run against the old code.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from datetime import timedelta
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dara.evaluation import toolrl_format
from dara.rewards import act, toolrl
from dara.rewards import math as math_rewards

REPO = Path(__file__).resolve().parents[1]
PER_CALL_LIMIT_S = 3.0
FUZZ = settings(
    max_examples=150,
    deadline=timedelta(milliseconds=1000),
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same examples on every run: a failure here is reproducible, never a flake
)
MEGABYTE = 1_000_000

GT_ONE_CALL = toolrl.render_answer("look up", calls=[{"name": "get_weather", "parameters": {"city": "Paris", "n": 2}}])
GT_TWO_CALLS = toolrl.render_answer(
    "two", calls=[{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {"y": [1, 2], "z": None}}]
)
GT_RESPONSE = toolrl.render_answer("no tool", response="I cannot.")
GT_BOTH = toolrl.render_answer("both", calls=[{"name": "a", "parameters": {}}], response="done")
GT_THINK_ONLY = toolrl.render_answer("only thinking")
GROUND_TRUTHS = (GT_ONE_CALL, GT_TWO_CALLS, GT_RESPONSE, GT_BOTH, GT_THINK_ONLY)
GT_WITH_CALLS = (GT_ONE_CALL, GT_TWO_CALLS, GT_BOTH)


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def tool_block(*lines: str, think: str = "t") -> str:
    return f"<think>{think}</think>\n<tool_call>\n" + "\n".join(lines) + "\n</tool_call>"


def call_line(parameters_json: str, name: str = "get_weather") -> str:
    return f'{{"name": "{name}", "parameters": {parameters_json}}}'


# Hostile outputs, by what they attack. Each is a full response (no chat markers unless named).
CORPUS: dict[str, str] = {
    "empty": "",
    "whitespace": " \n\t\r\x0b\x0c",
    "nul bytes": "<think>\x00</think>\n<tool_call>\n" + call_line('{"city": "Pa\\u0000ris"}') + "\x00\n</tool_call>",
    "raw nul in json": tool_block('{"name": "get_weather\x00", "parameters": {}}'),
    "lone surrogates": "<think>\ud800\udfff\ud83d</think>\n<response>\udc00</response> \\boxed{\ud800} <action>\ud800</action>",
    "escaped surrogate in json": tool_block(call_line('{"city": "\\ud800"}')),
    "unicode mix": "<think>ℝ∑ 😀 \u202e\u200b\u0301 ﷽</think>\n<response>日本語 \\boxed{½}</response>",
    # JSON: the crash of issue #13, and its relatives
    "deep json list": tool_block(deep_json(5000)),
    "deep json in parameters": tool_block(call_line(deep_json(3000))),
    "deep json object": tool_block('{"a": ' * 3000 + "1" + "}" * 3000),
    "deep json at the limit": tool_block(call_line('{"city": ' + deep_json(98) + "}")),
    "deep json past the limit": tool_block(call_line('{"city": ' + deep_json(99) + "}")),
    "deep json unclosed": tool_block("[" * 100_000),
    "huge integer": tool_block(call_line('{"city": ' + "9" * 5000 + "}")),
    "huge integer name": tool_block('{"name": ' + "1" * 10_000 + ', "parameters": {}}'),
    "overflowing floats": tool_block(call_line('{"city": 1e999, "n": -1e999}'), call_line('{"n": 1e-999}')),
    "nan and infinity": tool_block(call_line('{"city": NaN, "n": Infinity}'), '{"name": NaN, "parameters": {}}'),
    "non-object lines": tool_block("[1, 2]", '"s"', "null", "true", "1e999"),
    "name of every type": tool_block('{"name": [1], "parameters": {}}', '{"name": {}, "parameters": {}}'),
    "parameters not an object": tool_block('{"name": "get_weather", "parameters": [1]}'),
    "many calls": tool_block(*[call_line('{"city": "Paris"}')] * 5000),
    "megabyte json line": tool_block(call_line('{"city": "' + "x" * MEGABYTE + '"}')),
    "megabyte json list": tool_block(call_line('{"city": [' + "1," * (MEGABYTE // 2) + "1]}")),
    "megabyte json nesting": tool_block(call_line('{"city": ' + "[[1]," * (MEGABYTE // 5) + "1" + "]" * (MEGABYTE // 5) + "}")),
    # size
    "megabyte of text": "a" * MEGABYTE,
    "megabyte think": "<think>" + "word " * (MEGABYTE // 5) + "</think>\n<response>x</response>",
    "megabyte of newlines": tool_block(*[""] * MEGABYTE),
    # repeated tags, alone and in the pairs that make lazy patterns backtrack
    **{f"repeated {tag}": tag * 20_000 for tag in ("<think>", "</think>", "<tool_call>", "</tool_call>",
                                                   "<response>", "</response>", "<action>", "</action>",
                                                   "<|im_start|>assistant", "<|im_end|>", "\\boxed{", "}")},
    "repeated think-response pairs": "<think>" + "</think>\n<response></response>x" * 20_000,
    "repeated think-tool pairs": "<think>" + "</think>\n<tool_call>\n{}\n</tool_call>\n<response>y</response>" * 5000,
    "repeated open tool blocks": "<tool_call>\n" * 50_000 + "</tool_call>",
    "repeated action blocks": "<action>" * 30_000 + "go to hall" + "</action>" * 30_000,
    "nested tags": "<think>" * 3000 + "x" + "</think>" * 3000 + "\n<response>" * 3000 + "</response>" * 3000,
    # truncated blocks
    "truncated think": "<think>I will call get_weather",
    "truncated tool block": "<think>t</think>\n<tool_call>\n" + '{"name": "get_weather", "parameters": {"city": "Pa',
    "truncated response": "<think>t</think>\n<response>I can",
    "truncated box": "so the answer is \\boxed{\\frac{1}{",
    "truncated action": "I choose <action>go to",
    "closing before opening": "</tool_call>\n{}\n<tool_call></think><think></response><response>",
    # LaTeX and numbers for the math channel
    "power tower": "\\boxed{9^{9^{9^9}}}",
    "tall power tower": "\\boxed{" + "9^{" * 40 + "9" + "}" * 40 + "}",
    "overflowing number": "\\boxed{1e999}",
    "long number": "\\boxed{" + "9" * 5000 + "}",
    "deep braces": "\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}",
    "deep short braces": "\\boxed{" + "{" * 100 + "1" + "}" * 100 + "}",
    "megabyte box": "\\boxed{" + "x+" * (MEGABYTE // 2) + "1}",
    "megabyte of open braces": "\\boxed{" + "{" * MEGABYTE,
    "division by zero": "\\boxed{\\frac{1}{0}}",
    "nul in box": "\\boxed{1\x002}",
    "surrogate in box": "\\boxed{\ud800 + 1}",
    "latex commands": "\\boxed{\\left( \\begin{matrix} 1 & 2 \\\\ 3 & 4 \\end{matrix} \\right)^{-1} \\sqrt[3]{\\infty}}",
    "chat markers": "<|im_start|>assistant\n<|im_start|>assistant<|im_end|><|im_end|>" * 1000,
}
SMALL_CORPUS = {name: text for name, text in CORPUS.items() if len(text) < 100_000}
# The math worker receives these (a closed box under the size limits); the rest never reach it.
MATH_CORPUS_NAMES = ("power tower", "tall power tower", "overflowing number", "division by zero", "latex commands",
                     "nul in box", "surrogate in box", "lone surrogates", "unicode mix", "long number")

# Fragments that hypothesis stitches together with arbitrary text: tags, JSON pieces, LaTeX, markers.
FRAGMENTS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>", "<action>", "</action>",
    "\n", "\n\n", " ", "<|im_start|>assistant", "<|im_end|>", "{", "}", "[", "]", '"', ":", ",",
    '{"name": "get_weather", "parameters": {"city": "Paris", "n": 2}}', '{"name": "a", "parameters": {"x": 1}}',
    '"name"', '"parameters"', "NaN", "Infinity", "1e999", "-0", "9" * 50, "null", "true", "\\u0000", "\\ud800",
    "\x00", "\ud800", "\\boxed{", "\\boxed ", "\\frac{1}{2}", "^{", "9^{9^{9^9}}", "\\left(", "go to hall",
    "take mug", "[" * 60, "]" * 60, "{" * 60, "}" * 60,
]
model_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=40).map("".join)
NON_STRINGS = [None, 1, 1.5, b"<think>x</think>", ["<think>x</think>"], {"text": "x"}]


def timed(function, *args, **kwargs):
    """The call's result, after checking it came back within PER_CALL_LIMIT_S."""
    started = time.perf_counter()
    result = function(*args, **kwargs)
    elapsed = time.perf_counter() - started
    assert elapsed < PER_CALL_LIMIT_S, f"{getattr(function, '__name__', function)} took {elapsed:.2f} s"
    return result


# ------------------------------------------------------------------ the case of issue #13 (old API names only)


def test_deeply_nested_json_tool_call_scores_the_failure_value():
    response = tool_block(deep_json(5000))
    assert toolrl.correctness_reward(response, GT_ONE_CALL) == toolrl.CORRECTNESS_MIN
    assert toolrl.format_reward(response, GT_ONE_CALL) == 1.0  # the layout is right; only the JSON is unreadable
    assert toolrl_format.decode_calls(response) == []


def test_deeply_nested_json_parameters_score_the_failure_value():
    response = tool_block(call_line(deep_json(3000)))
    assert toolrl.correctness_reward(response, GT_ONE_CALL) == toolrl.CORRECTNESS_MIN
    assert toolrl_format.decode_calls(response) == []


def test_integer_past_the_conversion_limit_scores_the_failure_value():
    response = tool_block(call_line('{"city": ' + "9" * 5000 + "}"))
    assert toolrl.correctness_reward(response, GT_ONE_CALL) == toolrl.CORRECTNESS_MIN
    assert toolrl_format.decode_calls(response) == []


def nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_json_depth_limit_is_exact_and_says_what_it_saw():
    from dara.rewards.outcome import RewardOutcome

    assert toolrl.decode_json(deep_json(toolrl.MAX_JSON_DEPTH)) == nested_list(toolrl.MAX_JSON_DEPTH)
    with pytest.raises(toolrl.ToolCallParseError, match=f"nested deeper than {toolrl.MAX_JSON_DEPTH} levels"):
        toolrl.decode_json(deep_json(toolrl.MAX_JSON_DEPTH + 1))
    # A legal call whose value sits at the limit still scores (name and key credit); one level more is unreadable.
    at_limit = tool_block(call_line('{"city": ' + deep_json(toolrl.MAX_JSON_DEPTH - 2) + ', "n": 2}'))
    past_limit = tool_block(call_line('{"city": ' + deep_json(toolrl.MAX_JSON_DEPTH - 1) + ', "n": 2}'))
    # name 1 + keys 1 + the equal value of n 1, out of 1 + (1 + 2 parameters): 6 * 3 / 4 - 3
    assert toolrl.correctness_outcome(at_limit, GT_ONE_CALL) == RewardOutcome(1.5)
    outcome = toolrl.correctness_outcome(past_limit, GT_ONE_CALL)
    assert outcome.score == toolrl.CORRECTNESS_MIN
    assert outcome.parse_failure == f"tool-call line 1 is JSON nested deeper than {toolrl.MAX_JSON_DEPTH} levels"


# ------------------------------------------------------------------ checks of each reward's range


def check_toolrl(response: str) -> None:
    assert timed(toolrl.format_outcome, response, GT_ONE_CALL).failed is False
    assert timed(toolrl.correctness_reward, response, GT_ONE_CALL) == toolrl.correctness_outcome(response, GT_ONE_CALL).score
    for ground_truth in GROUND_TRUTHS:
        assert timed(toolrl.format_reward, response, ground_truth) in (0.0, 1.0)
        outcome = timed(toolrl.correctness_outcome, response, ground_truth)
        assert toolrl.CORRECTNESS_MIN <= outcome.score <= toolrl.CORRECTNESS_MAX
        if outcome.failed:
            assert outcome.score == toolrl.CORRECTNESS_MIN and ground_truth in GT_WITH_CALLS
            assert 0 < len(outcome.parse_failure) <= 200
    for max_words in (0, 16):
        length = timed(toolrl.think_length_outcome, response, max_words)
        assert length.score in (0.0, 1.0) and (not length.failed or length.score == 0.0)
    assert isinstance(timed(toolrl.extract_response, response), str)
    for block in ("first", "last"):
        try:
            calls = timed(toolrl.parse_tool_calls, response, block=block)
        except toolrl.ToolCallParseError:
            continue  # the parser's documented refusal
        assert all(isinstance(call, dict) and "name" in call for call in calls)


def check_act(response: str) -> None:
    for admissible in (None, ["go to hall", "take mug"]):
        reward, parse_failure = timed(act.composite_outcome, response, "take mug", admissible)
        assert reward.accuracy in (0.0, act.ACCURACY_REWARD)
        assert reward.admissible in (0.0, act.ADMISSIBLE_REWARD)
        assert reward.format in (0.0, act.MISSING_TAG_PENALTY)
        assert reward.total == reward.accuracy + reward.admissible + reward.format
        assert (parse_failure is not None) == (reward.format == act.MISSING_TAG_PENALTY)
        assert reward == act.composite(response, "take mug", admissible)
    action = timed(act.extract_action, response)
    assert action is None or isinstance(action, str)


def check_evaluation_decoders(response: str) -> None:
    calls = timed(toolrl_format.decode_calls, response)
    assert all(set(call) == {"name", "parameters"} and isinstance(call["name"], str)
               and isinstance(call["parameters"], dict) for call in calls)  # fmt: skip
    assert timed(toolrl_format.format_score, response) in (0.0, 1.0)
    assert 0.0 <= timed(toolrl_format.case_format, [response, response]) <= 1.0
    assert 0.0 <= timed(toolrl_format.case_think_length, [response]) <= 1.0
    from dara.evaluation.math_eval import exact_number, numeric_fallback

    assert isinstance(timed(numeric_fallback, response, "2"), bool)
    number = timed(exact_number, response)
    assert number is None or isinstance(number, Fraction)
    boxed = timed(math_rewards.last_boxed, response)
    assert boxed is None or isinstance(boxed, str)


def check_verl_toolcall(response: str) -> None:
    from dara.verl_plugin import rewards as verl_rewards

    in_chat = "<|im_start|>assistant\n" + response + "<|im_end|>"
    solutions = [in_chat] if len(response) > 10_000 else [response, in_chat]  # large ones once: time
    for ground_truth in (GT_ONE_CALL, GT_RESPONSE):
        for solution in solutions:
            result = timed(verl_rewards.compute_toolcall_score, "rlla", solution, ground_truth, {},
                           with_think_length=True)  # fmt: skip
            channels = verl_rewards.TOOLCALL3_KEYS
            assert set(result) == {"score", *channels, *(f"parse_failure/{key}" for key in channels)}
            assert all(isinstance(value, float) and math.isfinite(value) for value in result.values())
            assert result["score"] == sum(result[key] for key in channels)
            assert all(result[f"parse_failure/{key}"] in (0.0, 1.0) for key in channels)


CHECKS = [check_toolrl, check_act, check_evaluation_decoders, check_verl_toolcall]


@pytest.mark.parametrize("name", list(CORPUS))
def test_corpus_output_scores_in_range_within_the_time_limit(name):
    for check in CHECKS:
        check(CORPUS[name])


@FUZZ
@given(response=model_text)
def test_generated_output_scores_in_range(response):
    for check in CHECKS:
        check(response)


@FUZZ
@given(response=st.text())
def test_arbitrary_unicode_scores_in_range(response):
    check_toolrl(response)
    check_act(response)
    check_evaluation_decoders(response)


@FUZZ
@given(parameters=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=30,
))  # fmt: skip
def test_any_decoded_json_value_scores_in_range(parameters):
    # Values as the model might write them (NaN and infinities included), in a well-formed call.
    response = tool_block(call_line(json.dumps({"city": parameters})), call_line(json.dumps(parameters)))
    check_toolrl(response)
    check_evaluation_decoders(response)


# ------------------------------------------------------------------ tasks: what the tiny trainer and evaluation call


def _task_items(name: str, n: int) -> tuple[object, list[dict]]:
    from dara.tasks import get_task

    task = get_task(name)
    return task, task.items("train", n, seed=0)


@pytest.mark.parametrize("task_name", ["toolcall", "toolcall3", "act_critic"])
def test_task_scores_of_hostile_outputs_are_in_range(task_name):
    from dara.evaluation.tiny_heldout import task_metrics
    from dara.rewards.outcome import parse_failure_metrics

    task, pool = _task_items(task_name, 4)
    responses = list(SMALL_CORPUS.values()) + [task.demonstration(pool[0], np.random.default_rng(0))]
    items = [pool[i % len(pool)] for i in range(len(responses))]
    lengths = [len(response) for response in responses]
    scored = timed(task.score_outcomes, responses, items, lengths)
    assert scored.rewards.shape == scored.parse_failures.shape == (len(responses), len(task.reward_names))
    assert scored.parse_failures.dtype == bool and np.isfinite(scored.rewards).all()
    np.testing.assert_array_equal(task.score(responses, items, lengths), scored.rewards)
    low = {"format": 0.0, "correctness": -3.0, "think_length": 0.0, "accuracy": 0.0, "admissible": 0.0}
    high = {"format": 1.0, "correctness": 3.0, "think_length": 1.0, "accuracy": 1.0, "admissible": 0.1}
    if task_name == "act_critic":
        low["format"], high["format"] = -0.5, 0.0
    for k, name in enumerate(task.reward_names):
        column, failed = scored.rewards[:, k], scored.parse_failures[:, k]
        assert ((low[name] <= column) & (column <= high[name])).all(), name
        # A failure scores the channel's failure value: the bottom of its range.
        assert (column[failed] == low[name]).all(), name
    metrics = parse_failure_metrics(task.reward_names, scored.parse_failures)
    assert metrics == {f"reward_parse_failures/{name}": float(scored.parse_failures[:, k].sum())
                       for k, name in enumerate(task.reward_names)}  # fmt: skip
    assert metrics[f"reward_parse_failures/{task.reward_names[1]}"] > 0  # the corpus is mostly unreadable
    held_out = timed(task_metrics, task, items, responses, lengths, 48)
    assert all(math.isfinite(value) for value in held_out.values())


def test_parse_failure_metrics_refuses_a_mismatched_array():
    from dara.rewards.outcome import parse_failure_metrics

    assert parse_failure_metrics(["a", "b"], np.array([[True, False], [True, True]])) == {
        "reward_parse_failures/a": 2.0, "reward_parse_failures/b": 1.0}  # fmt: skip
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        parse_failure_metrics(["a", "b"], np.zeros((3, 3), dtype=bool))
    with pytest.raises(TypeError, match="booleans"):
        parse_failure_metrics(["a"], np.zeros((3, 1)))


# ------------------------------------------------------------------ math correctness (worker processes)


def test_math_correctness_of_hostile_outputs_is_in_range_and_bounded_in_time():
    from dara.evaluation.math_eval import grade
    from dara.evaluation.tiny_heldout import task_metrics
    from dara.verl_plugin import rewards as verl_rewards

    responses = list(CORPUS.values()) + ["so \\boxed{2}", "so \\boxed{3}"]
    answers = ["2"] * len(responses)
    timeout_s = 3.0
    math_rewards.correctness_rewards(["\\boxed{1}"], ["1"])  # the pool's start is not an item's time
    started = time.perf_counter()
    outcomes = math_rewards.correctness_outcomes(responses, answers, timeout_s=timeout_s)
    elapsed = time.perf_counter() - started
    # Items under the size limits reach the worker; each has timeout_s, and a killed worker costs a restart.
    assert elapsed < len(MATH_CORPUS_NAMES) * timeout_s + 60
    assert [outcome.score for outcome in outcomes[-2:]] == [1.0, 0.0]
    assert not outcomes[-1].failed  # a wrong answer is not a parse failure
    by_name = dict(zip(CORPUS, outcomes))
    for name, outcome in by_name.items():
        assert outcome.score == 0.0, name
    assert by_name["empty"].parse_failure == "no closed \\boxed{} answer"
    assert by_name["megabyte box"].parse_failure.startswith("boxed answer of 1000001 characters exceeds")
    assert by_name["deep braces"].parse_failure == "boxed answer of 6001 characters exceeds the 2000-character limit"
    assert by_name["deep short braces"].parse_failure == f"boxed answer nests braces deeper than {math_rewards.MAX_BOXED_DEPTH} levels"
    assert by_name["truncated box"].parse_failure == "no closed \\boxed{} answer"
    assert by_name["repeated \\boxed{"].failed and by_name["megabyte of open braces"].failed
    # The same items through the callers: the math task, the held-out grader, verl's entry point.
    from dara.tasks import get_task

    task = get_task("math_length")
    items = [{"answer": "2", "prompt": "", "operands": [1, 1, 0]}] * len(responses)
    lengths = [7] * len(responses)
    scored = task.score_outcomes(responses, items, lengths)
    assert scored.rewards[:, 0].tolist() == [outcome.score for outcome in outcomes]
    # Whether math-verify's parse or its comparison runs out of time first on a power tower depends on the
    # machine's load, so only the verdicts reached without a worker are compared.
    offline = [k for k, name in enumerate(CORPUS) if name not in MATH_CORPUS_NAMES]
    assert scored.parse_failures[offline, 0].tolist() == [outcomes[k].failed for k in offline]
    assert not scored.parse_failures[:, 1].any()
    assert set(task_metrics(task, items, responses, lengths, 48)) == {"accuracy", "exceed", "joint", "skipped_step",
                                                                      "short_wrong"}
    assert grade(responses, answers)[-2:] == [True, False] and not any(grade(responses, answers)[:-2])
    assert by_name["power tower"].score == 0.0  # parsed; the comparison runs out of time: a wrong answer
    for name in ("nul bytes", "megabyte box", "deep braces"):
        result = verl_rewards.compute_math_score("deepscaler", CORPUS[name], "2", {"valid_response_length": 9})
        assert result == {"score": 1.0, "correctness": 0.0, "length": 1.0,
                          "parse_failure/correctness": 1.0, "parse_failure/length": 0.0}  # fmt: skip


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(response=model_text)
def test_generated_math_output_scores_in_range(response):
    # deadline=None: an item that reaches the worker may use its whole timeout; the wall clock is checked here.
    started = time.perf_counter()
    outcome = math_rewards.correctness_outcome(response, "2", timeout_s=2.0)
    assert outcome.score in (0.0, 1.0) and (not outcome.failed or outcome.score == 0.0)
    assert time.perf_counter() - started < 2.0 + 60  # one item's limit, plus a worker restart after a kill


# ------------------------------------------------------------------ non-string inputs


@pytest.mark.parametrize("value", NON_STRINGS, ids=lambda value: type(value).__name__)
def test_non_string_output_is_a_type_error(value):
    from dara.evaluation.math_eval import exact_number

    calls = [
        lambda: toolrl.format_reward(value, GT_ONE_CALL), lambda: toolrl.correctness_reward(value, GT_ONE_CALL),
        lambda: toolrl.think_length_reward(value), lambda: toolrl.extract_response(value),
        lambda: toolrl.correctness_outcome(value, GT_ONE_CALL), lambda: toolrl.decode_json(value),
        lambda: act.composite(value, "take mug"), lambda: math_rewards.last_boxed(value),
        lambda: math_rewards.correctness_reward(value, "2"), lambda: toolrl_format.decode_calls(value),
        lambda: toolrl_format.format_score(value), lambda: exact_number(value),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(TypeError, match="must be|str"):
            call()


# ------------------------------------------------------------------ the bfcl-eval handler (its own environment)

HANDLER_SCRIPT = """
import json, sys, time
from dara.evaluation.bfcl_data import set_scratch_root
set_scratch_root()
from dara.evaluation.bfcl_handler import make_handler
handler = make_handler()
report = {}
for name, text in json.load(sys.stdin).items():
    started = time.perf_counter()
    try:
        ast = handler.decode_ast(text, "python", False)
        executable = handler.decode_execute(text, False)
        ok = isinstance(ast, list) and isinstance(executable, list) and len(ast) == len(executable)
        outcome = "ok" if ok else f"bad result {type(ast).__name__} {type(executable).__name__}"
    except BaseException as error:
        outcome = f"raised {type(error).__name__}: {str(error)[:200]}"
    report[name] = {"outcome": outcome, "seconds": time.perf_counter() - started}
json.dump(report, sys.stdout)
"""


def test_bfcl_handler_decodes_hostile_outputs():
    from dara.evaluation.tiny_heldout import default_bfcl_python

    bfcl_python = default_bfcl_python()
    if not bfcl_python.exists():
        pytest.skip(f"no bfcl environment at {bfcl_python} (build it with `make setup`, or set DARA_BFCL_PYTHON)")
    # The decoding itself is decode_calls, run on every entry above; here the handler's wrapping of it (bfcl's
    # AST and executable forms) meets every small entry and the two large ones that decode into many values.
    # Lone surrogates survive the trip as JSON escapes (ensure_ascii), as they would in a served response.
    sent = {**SMALL_CORPUS, **{name: CORPUS[name] for name in ("many calls", "megabyte json list")}}
    corpus = json.dumps(sent)
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src")}  # this checkout's dara, not the installed one
    result = subprocess.run([str(bfcl_python), "-c", HANDLER_SCRIPT], input=corpus, capture_output=True, text=True,
                            env=environment, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout)
    assert set(report) == set(sent)
    for name, entry in report.items():
        assert entry["outcome"] == "ok", (name, entry)
        assert entry["seconds"] < PER_CALL_LIMIT_S, (name, entry)
