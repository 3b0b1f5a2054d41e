"""ToolRL rewards: every branch of format/correctness/think-length, hand-computed partial credit, properties."""

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dara.rewards.toolrl import (
    CORRECTNESS_MAX,
    CORRECTNESS_MIN,
    ToolCallParseError,
    correctness_reward,
    extract_response,
    format_reward,
    multiset_jaccard,
    parse_tool_calls,
    render_answer,
    think_length_reward,
)


def call(name, **parameters):
    return {"name": name, "parameters": parameters}


def tool_block(*lines, think="t"):
    """A response whose tool-call block holds the given raw lines (strings) or calls (dicts)."""
    body = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    return f"<think>{think}</think>\n<tool_call>\n{body}\n</tool_call>"


# ---------------------------------------------------------------- extract_response


def test_extract_response_takes_last_assistant_turn_and_cuts_at_turn_end():
    text = (
        "<|im_start|>system\nsys<|im_end|>\n<|im_start|>assistant\nold<|im_end|>\n"
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n  <think>x</think>  <|im_end|>\n<|endoftext|>"
    )
    assert extract_response(text) == "<think>x</think>"


def test_extract_response_without_marker_is_whole_text_stripped():
    assert extract_response("  <think>a</think>\n") == "<think>a</think>"
    assert extract_response("<think>a</think><|im_end|>junk") == "<think>a</think>"


def test_extract_response_rejects_non_text():
    with pytest.raises(TypeError):
        extract_response(b"bytes")


# ---------------------------------------------------------------- format_reward

GT_RESPONSE = render_answer("g", response="hi")
GT_TOOL = render_answer("g", [call("f", a=1)])
GT_BOTH = render_answer("g", [call("f", a=1)], response="hi")
GT_NEITHER = render_answer("g")


@pytest.mark.parametrize(
    ("response", "ground_truth", "expected"),
    [
        # response-only template
        ("<think>x</think>\n<response>y</response>", GT_RESPONSE, 1.0),
        ("<think>x</think><response>y</response>", GT_RESPONSE, 0.0),  # newline between blocks required
        ("<think>x</think>\n<response>y</response> trailing", GT_RESPONSE, 0.0),
        ("lead <think>x</think>\n<response>y</response>", GT_RESPONSE, 0.0),
        ("<think>x</think>\n<response>y</response><response>z</response>", GT_RESPONSE, 0.0),  # tag twice
        ("<think>x</think>\n<tool_call>\n{}\n</tool_call>", GT_RESPONSE, 0.0),  # wrong template
        ("<think>a<think>b</think>\n<response>y</response>", GT_RESPONSE, 1.0),  # think tags are not counted
        ("<think>x</think>\n<response>y</response>\n", GT_RESPONSE, 1.0),  # `$` accepts one final newline
        # tool-only template (format does not read the JSON)
        ("<think>x</think>\n<tool_call>\nnot json\n</tool_call>", GT_TOOL, 1.0),
        ("<think>x</think>\n<tool_call>{}</tool_call>", GT_TOOL, 0.0),  # newlines inside the block required
        ("<think>x</think>\n<tool_call>\n{}\n</tool_call>\n<response>y</response>", GT_TOOL, 0.0),
        ("<think>x</think>\n<tool_call>\n<tool_call>\n</tool_call>", GT_TOOL, 0.0),
        ("<think>x</think>\n<tool_call>\n{}\n</tool_call>\n<tool_call>\n{}\n</tool_call>", GT_TOOL, 0.0),
        # both
        ("<think>x</think>\n<tool_call>\n{}\n</tool_call>\n<response>y</response>", GT_BOTH, 1.0),
        ("<think>x</think>\n<response>y</response>\n<tool_call>\n{}\n</tool_call>", GT_BOTH, 0.0),  # order
        ("<think>x</think>\n<tool_call>\n{}\n</tool_call>", GT_BOTH, 0.0),
        ("<think>x</think>\n<tool_call>\n{}\n</tool_call>\n<response>y</response></response>", GT_BOTH, 0.0),
        # neither
        ("<think>x</think>", GT_NEITHER, 1.0),
        ("<think>x\nmore</think>", GT_NEITHER, 1.0),
        ("<think>x</think>\n<response>y</response>", GT_NEITHER, 0.0),
        ("x", GT_NEITHER, 0.0),
    ],
)
def test_format_reward_cases(response, ground_truth, expected):
    assert format_reward(response, ground_truth) == expected


def test_format_template_is_chosen_by_ground_truth_not_response():
    response = "<think>x</think>\n<response>y</response>"
    assert format_reward(response, "<response>anything</response>") == 1.0
    assert format_reward(response, "<tool_call>\n{}\n</tool_call>") == 0.0


# ---------------------------------------------------------------- parse_tool_calls


def test_parse_tool_calls_reads_json_lines_in_order():
    text = tool_block(call("a", x=1), call("b"))
    assert parse_tool_calls(text) == [call("a", x=1), call("b")]


def test_parse_tool_calls_first_and_last_block():
    text = tool_block(call("first")) + "\n" + tool_block(call("second"))
    assert parse_tool_calls(text) == [call("first")]
    assert parse_tool_calls(text, block="last") == [call("second")]
    with pytest.raises(ValueError, match="block"):
        parse_tool_calls(text, block="middle")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<think>t</think>", "no <tool_call>"),
        ("<tool_call>\n" + json.dumps(call("a")), "no </tool_call>"),
        (tool_block("{not json}"), "not JSON"),
        (tool_block(call("a"), "", call("b")), "line 2 is not JSON"),  # a blank line inside the block
        ("<tool_call>\n\n</tool_call>", "not JSON"),  # empty block
        (tool_block("[1, 2]"), "not an object"),
        (tool_block('"a string"'), "not an object"),
        (tool_block('{"parameters": {}}'), "no 'name'"),
        (tool_block('{"name": ["a"], "parameters": {}}'), "list name"),
    ],
)
def test_parse_tool_calls_errors(text, message):
    with pytest.raises(ToolCallParseError, match=message):
        parse_tool_calls(text)


def test_parse_error_is_a_value_error():
    assert issubclass(ToolCallParseError, ValueError)


# ---------------------------------------------------------------- multiset_jaccard


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([], [], 1.0),
        (["x"], [], 0.0),
        ([], ["x"], 0.0),
        (["x", "y"], ["y", "x"], 1.0),
        (["x"], ["y"], 0.0),
        (["x", "x"], ["x"], 0.5),  # multiset: 1 shared of 2 in the union
        (["x", "y", "z"], ["x", "y", "w"], 0.5),
        (["x", "x", "y"], ["x", "y", "y"], 0.5),
    ],
)
def test_multiset_jaccard(a, b, expected):
    assert multiset_jaccard(a, b) == pytest.approx(expected)


# ---------------------------------------------------------------- correctness_reward


def gt(*calls):
    return render_answer("g", list(calls))


def test_correctness_is_zero_when_ground_truth_calls_no_tool():
    assert correctness_reward(tool_block(call("a")), GT_RESPONSE) == 0.0
    assert correctness_reward("garbage", GT_NEITHER) == 0.0


def test_correctness_exact_match_is_max():
    ground_truth = gt(call("a", x=1), call("b", y="z"))
    assert correctness_reward(tool_block(call("a", x=1), call("b", y="z")), ground_truth) == CORRECTNESS_MAX


@pytest.mark.parametrize(
    "response",
    [
        "<think>t</think>\n<response>no call</response>",  # no <tool_call>
        "<think>t</think>\n<tool_call>\n" + json.dumps(call("a", x=1)),  # no </tool_call>
        tool_block("{'name': 'a'}"),  # not JSON (Python repr)
        tool_block(call("a", x=1), "", call("b")),  # a blank line between calls
        tool_block("[]"),  # not an object
        tool_block('{"parameters": {"x": 1}}'),  # no name
        tool_block('{"name": "a", "arguments": {"x": 1}}'),  # same name, no parameters
        tool_block('{"name": "a", "parameters": [1]}'),  # same name, parameters not an object
        tool_block('{"name": {"n": "a"}, "parameters": {}}'),  # unhashable name
    ],
)
def test_correctness_minus_three_paths(response):
    assert correctness_reward(response, gt(call("a", x=1))) == CORRECTNESS_MIN


@pytest.mark.parametrize(
    ("predicted", "ground_truth_calls", "expected"),
    [
        # names M=1; a: keys M=1 + 1 value -> 2; score 3 of max 1+(1+2)=4 -> 6*3/4-3
        ([call("a", x=1, y="p")], [call("a", x=1, y="q")], 1.5),
        # string "5" never equals integer 5: score 1+1+0=2 of 3 -> 1.0
        ([call("a", n="5")], [call("a", n=5)], 1.0),
        # extra predicted key: keys M=1/2, 1 value -> score 2.5 of 3 -> 2.0
        ([call("a", x=1, extra=2)], [call("a", x=1)], 2.0),
        # missing predicted key: keys M=1/2, 1 value -> 2.5 of 4 -> 0.75
        ([call("a", x=1)], [call("a", x=1, y=2)], 0.75),
        # wrong name: nothing matches -> -3 by score, not by parse error
        ([call("b", x=1)], [call("a", x=1)], -3.0),
        # one of two calls: names 1/2; a: 2 -> 2.5 of 1+2+2=5 -> 0.0
        ([call("a", x=1)], [call("a", x=1), call("b", y=1)], 0.0),
        # an extra call: names 1/2 + 2 -> 2.5 of 3 -> 2.0
        ([call("a", x=1), call("c")], [call("a", x=1)], 2.0),
        # no-parameter tool predicted with a parameter: keys M([], [x]) = 0 and no value -> unmatched; 1 of 2 -> 0.0
        ([call("a", x=1)], [call("a")], 0.0),
        # no-parameter tool, both empty: keys M = 1 -> exact lists anyway
        ([call("a")], [call("a")], 3.0),
        # extra top-level key breaks list equality but every part still scores full: 3.0
        ([{"name": "a", "parameters": {"x": 1}, "id": 7}], [call("a", x=1)], 3.0),
        # JSON values compare with Python ==: true == 1 and 1.0 == 1
        ([call("a", x=True, y=1.0)], [call("a", x=1, y=1)], 3.0),
    ],
)
def test_correctness_partial_credit_by_hand(predicted, ground_truth_calls, expected):
    assert correctness_reward(tool_block(*predicted), gt(*ground_truth_calls)) == pytest.approx(expected)


def test_correctness_duplicate_names_are_matched_by_best_parameters():
    ground_truth = gt(call("a", x=1), call("a", x=2))
    # swapped order: each gt call finds its own prediction (scores 2 each) -> full marks
    assert correctness_reward(tool_block(call("a", x=2), call("a", x=1)), ground_truth) == pytest.approx(3.0)
    # a duplicated single call: names [a,a] vs [a] -> 1/2; gt#1 takes it for 2, gt#2 none -> 2.5 of 5 -> 0.0
    assert correctness_reward(tool_block(call("a", x=1)), ground_truth) == pytest.approx(0.0)


def test_correctness_matching_is_greedy_in_ground_truth_order():
    # gt#1 takes the only prediction (x matches: 1+1=2) although gt#2 would have scored 3 with it:
    # names 1/2 + 2 = 2.5 of 1+3+3=7 -> 6*2.5/7-3
    ground_truth = gt(call("a", x=1, y=1), call("a", x=1, y=2))
    expected = 6 * 2.5 / 7 - 3
    assert correctness_reward(tool_block(call("a", x=1, y=2)), ground_truth) == pytest.approx(expected)


def test_correctness_ties_go_to_the_earliest_prediction():
    # gt#1 a{x} scores 1.5 against either prediction and takes the first (a{x,y}), leaving gt#2 a{x,y} the
    # worse a{x,z}: keys 1/3 + 1 value. names 1 + 1.5 + 4/3 of 1+2+3=6 -> 6*(23/6)/6-3 = 5/6.
    ground_truth = gt(call("a", x=1), call("a", x=1, y=5))
    response = tool_block(call("a", x=1, y=5), call("a", x=1, z=5))
    assert correctness_reward(response, ground_truth) == pytest.approx(5 / 6)


def test_correctness_duplicate_predictions_of_a_parameterless_tool():
    # names [a] vs [a,a] -> 1/2; gt a takes one prediction (keys M([],[])=1) -> 1.5 of 2 -> 1.5
    assert correctness_reward(tool_block(call("a"), call("a")), gt(call("a"))) == pytest.approx(1.5)


def test_correctness_reads_parameters_only_of_compared_predictions():
    # As ToolRL: a prediction whose name matches no ground-truth call is never asked for its parameters,
    # so its missing "parameters" costs only the name score: names 1/2 + 2 -> 2.5 of 3 -> 2.0.
    response = tool_block(call("a", x=1), '{"name": "z", "arguments": {}}')
    assert correctness_reward(response, gt(call("a", x=1))) == pytest.approx(2.0)


def test_correctness_ignores_blank_lines_at_the_block_edges():
    # The block is stripped before it is split into lines, as in ToolRL.
    response = "<think>t</think>\n<tool_call>\n\n" + json.dumps(call("a", x=1)) + "\n\n</tool_call>"
    assert correctness_reward(response, gt(call("a", x=1))) == CORRECTNESS_MAX


def test_correctness_scores_the_first_block_only():
    response = tool_block(call("wrong")) + "\n" + tool_block(call("a", x=1))
    assert correctness_reward(response, gt(call("a", x=1))) == CORRECTNESS_MIN


@pytest.mark.parametrize(
    "ground_truth",
    [
        "<tool_call>\nnot json\n</tool_call>",
        "<tool_call>\n" + json.dumps(call("a")),  # never closed
        "<tool_call>\n" + json.dumps({"name": "a"}) + "\n</tool_call>",  # no parameters
        "<tool_call>\n" + json.dumps({"name": 3, "parameters": {}}) + "\n</tool_call>",
    ],
)
def test_correctness_malformed_ground_truth_raises(ground_truth):
    with pytest.raises(ValueError, match="malformed ground truth"):
        correctness_reward(tool_block(call("a")), ground_truth)


# ---------------------------------------------------------------- think_length_reward


def think(n_words):
    return "<think>" + " ".join(["w"] * n_words) + "</think>\n<response>r</response>"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (think(0), 1.0),
        ("<think>   \n </think>", 1.0),
        (think(16), 1.0),
        (think(17), 0.0),
        ("<think>a\tb\nc  d</think>", 1.0),
        ("no tags at all", 0.0),
        ("<think>open only", 0.0),
        ("close only</think>", 0.0),
        ("<think>" + "w " * 40 + "</think> then <think>short</think>", 1.0),  # the last block counts
        ("<think>short</think> then <think>" + "w " * 40 + "</think>", 0.0),
        # a </think> only before the last <think>: that block never closes
        ("<think>a</think> <think>b", 0.0),
    ],
)
def test_think_length_cases(response, expected):
    assert think_length_reward(response) == expected


def test_think_length_limit_is_a_parameter():
    assert think_length_reward(think(3), max_words=3) == 1.0
    assert think_length_reward(think(4), max_words=3) == 0.0
    assert think_length_reward(think(0), max_words=0) == 1.0


@pytest.mark.parametrize("bad", [-1, 1.5, "16", True, None])
def test_think_length_rejects_bad_limits(bad):
    with pytest.raises(ValueError, match="max_words"):
        think_length_reward(think(1), max_words=bad)


# ---------------------------------------------------------------- render_answer


def test_render_answer_text():
    assert render_answer("r", [call("f", a=1)], response="ok") == (
        '<think>r</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>\n<response>ok</response>'
    )
    assert render_answer("r") == "<think>r</think>"


@pytest.mark.parametrize(
    ("calls", "response"), [(None, None), (None, "hello"), ([call("f", a=1), call("g")], None), ([call("f")], "x")]
)
def test_render_answer_scores_full_in_every_template(calls, response):
    ground_truth = render_answer("reasoning", calls, response)
    assert format_reward(ground_truth, ground_truth) == 1.0
    assert correctness_reward(ground_truth, ground_truth) == (CORRECTNESS_MAX if calls else 0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"think": "a </think> b"}, "think contains"),
        ({"think": "t", "response": "<response>"}, "response contains"),
        ({"think": "t", "calls": []}, "non-empty"),
        ({"think": "t", "calls": call("f")}, "non-empty"),
        ({"think": "t", "calls": [{"parameters": {}}]}, "string 'name'"),
        ({"think": "t", "calls": [{"name": "f"}]}, "dict 'parameters'"),
        ({"think": "t", "calls": [call("f", a="</tool_call>")]}, "call 0 contains"),
        ({"think": "t", "calls": [call("f", a=float("nan"))]}, "JSON compliant"),
        ({"think": "t", "calls": ["f"]}, "not a dict"),
    ],
)
def test_render_answer_refuses_what_would_not_parse_back(kwargs, message):
    with pytest.raises(ValueError, match=message):
        render_answer(**kwargs)


# ---------------------------------------------------------------- properties

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<response>", "</response>")
free_text = st.text(max_size=30).filter(lambda s: not any(tag in s for tag in TAGS))
names = st.sampled_from(["get_weather", "search", "book", "calc", "none"])
json_scalars = (
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False) | free_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(free_text, inner, max_size=3),
    max_leaves=6,
)
parameters = st.dictionaries(st.sampled_from(["a", "b", "c", "city", "n"]), json_values, max_size=4)
one_call = st.builds(lambda n, p: {"name": n, "parameters": p}, names, parameters)
calls_strategy = st.lists(one_call, min_size=1, max_size=4)


@settings(max_examples=150, deadline=None)
@given(think_text=free_text, calls=st.none() | calls_strategy, response=st.none() | free_text)
def test_property_render_scores_full(think_text, calls, response):
    answer = render_answer(think_text, calls, response)
    assert format_reward(answer, answer) == 1.0
    assert correctness_reward(answer, answer) == (CORRECTNESS_MAX if calls else 0.0)
    if calls:
        assert parse_tool_calls(answer) == calls


@settings(max_examples=200, deadline=None)
@given(gt_calls=calls_strategy, predicted=calls_strategy, noise=st.text(max_size=40))
def test_property_rewards_stay_in_range(gt_calls, predicted, noise):
    ground_truth = render_answer("g", gt_calls)
    for response in (render_answer("p", predicted), noise, render_answer("p", predicted) + noise, noise + ground_truth):
        assert CORRECTNESS_MIN <= correctness_reward(response, ground_truth) <= CORRECTNESS_MAX
        assert format_reward(response, ground_truth) in (0.0, 1.0)
        assert think_length_reward(response) in (0.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(
    gt_calls=calls_strategy,
    predicted=st.lists(one_call, min_size=1, max_size=4, unique_by=lambda c: c["name"]),
    data=st.data(),
)
def test_property_order_of_distinct_predicted_tools_does_not_matter(gt_calls, predicted, data):
    ground_truth = render_answer("g", gt_calls)
    reference = correctness_reward(render_answer("p", predicted), ground_truth)
    permuted = data.draw(st.permutations(predicted))
    assert correctness_reward(render_answer("p", permuted), ground_truth) == pytest.approx(reference, abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(calls=calls_strategy)
def test_property_every_order_of_the_true_calls_scores_full(calls):
    ground_truth = render_answer("g", calls)
    for order in itertools.islice(itertools.permutations(calls), 6):
        assert correctness_reward(render_answer("p", list(order)), ground_truth) == pytest.approx(CORRECTNESS_MAX)
