"""The tiny tasks: determinism from a seed, disjoint splits, demonstrations that score as designed."""

import json

import numpy as np
import pytest

from dara.tasks import TASK_NAMES, get_task, split_of
from dara.tasks.base import HELDOUT_PERCENT

OPTIONS = {"toolcall": {}, "toolcall3": {}, "math_length": {}, "act_critic": {}}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_items_are_deterministic_from_the_seed(name):
    task = get_task(name)
    assert task.items("train", 50, seed=3) == get_task(name).items("train", 50, seed=3)
    assert task.items("train", 50, seed=3) != task.items("train", 50, seed=4)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_splits_are_disjoint_and_follow_the_hash(name):
    task = get_task(name)
    n_heldout = 60 if name == "math_length" else 150  # the arithmetic space is small
    train = {item["prompt"] for seed in (0, 1) for item in task.items("train", 300, seed=seed)}
    heldout = {item["prompt"] for seed in (0, 1) for item in task.items("heldout", n_heldout, seed=seed)}
    assert not train & heldout
    assert {split_of(p) for p in train} == {"train"} and {split_of(p) for p in heldout} == {"heldout"}


def test_split_hash_holds_out_about_the_configured_share():
    keys = [f"prompt {i}" for i in range(5000)]
    share = sum(split_of(k) == "heldout" for k in keys) / len(keys)
    assert abs(share - HELDOUT_PERCENT / 100) < 0.02


@pytest.mark.parametrize("name", TASK_NAMES)
def test_items_are_json_serialisable_and_distinct(name):
    items = get_task(name).items("heldout", 20, seed=0)
    json.dumps(items)
    assert len({item["prompt"] for item in items}) == len({item["id"] for item in items}) == 20


def test_asking_for_more_items_than_exist_raises():
    with pytest.raises(ValueError, match="fewer than"):
        get_task("math_length").items("heldout", 5000)


def test_unknown_task_and_bad_options_raise():
    with pytest.raises(ValueError, match="unknown task"):
        get_task("toolcal")
    with pytest.raises(ValueError, match="format_rate"):
        get_task("toolcall", format_rate=1.5)
    with pytest.raises(TypeError):
        get_task("toolcall", format_rat=0.1)


def _score_demos(task, items, n_tokens=None):
    rng = np.random.default_rng(0)
    demos = [task.demonstration(item, rng) for item in items]
    return demos, task.score(demos, items, n_tokens or [1] * len(items))


def test_toolcall_demonstrations_are_correct_and_format_only_at_the_rate():
    task = get_task("toolcall", format_rate=0.2)
    items = task.items("train", 400)
    demos, rewards = _score_demos(task, items)
    assert task.reward_names == ("format", "correctness")
    with_tool = np.array([bool(item["calls"]) for item in items])
    # Every demonstration makes the right call (3) or correctly calls nothing (0).
    assert np.all(rewards[with_tool, 1] == 3.0) and np.all(rewards[~with_tool, 1] == 0.0)
    assert 0.12 < rewards[:, 0].mean() < 0.28
    # A format failure is exactly the near-miss separator.
    assert all(("</think>\n" in d) == (f == 1.0) for d, f in zip(demos, rewards[:, 0]))


def test_toolcall_heldout_items_carry_schemas_calls_and_ground_truth():
    item = next(i for i in get_task("toolcall").items("heldout", 30) if i["calls"])
    tool = item["tools"][0]
    assert set(tool) == {"name", "description", "parameters"} and tool["parameters"]["type"] == "object"
    assert set(item["calls"][0]) == {"name", "arguments"}
    assert item["calls"][0]["name"] in {t["name"] for t in item["tools"]}
    assert get_task("toolcall").score([item["ground_truth"]], [item], [1]).tolist() == [[1.0, 3.0]]


def test_toolcall3_think_length_follows_the_word_limit():
    task = get_task("toolcall3", think_max_words=4, think_filler_max=6, format_rate=1.0)
    items = task.items("train", 300)
    demos, rewards = _score_demos(task, items)
    words = np.array([len(d.split("</think>")[0].removeprefix("<think>").split()) for d in demos])
    assert np.array_equal(rewards[:, 2] == 1.0, words <= 4)
    assert 0.05 < rewards[:, 2].mean() < 0.6
    assert np.all(rewards[:, 0] == 1.0)


def test_math_demonstrations_are_correct_and_length_counts_tokens():
    task = get_task("math_length", length_budget=20)
    items = task.items("train", 40)
    demos, rewards = _score_demos(task, items, n_tokens=[20] * 20 + [21] * 20)
    assert np.all(rewards[:, 0] == 1.0)
    assert rewards[:20, 1].tolist() == [1.0] * 20 and rewards[20:, 1].tolist() == [0.0] * 20
    wrong = task.score(["\\boxed{99}"], items[:1], [3])
    assert wrong.tolist() == [[0.0, 1.0]]


def test_math_answers_are_right():
    for item in get_task("math_length").items("train", 100):
        a, b, c = item["operands"]
        assert int(item["answer"]) == a + b - c >= 0


def test_act_expert_and_negative_are_shown_and_rewards_follow_the_composite():
    task = get_task("act_critic", tag_rate=1.0)
    items = task.items("train", 100)
    for item in items:
        assert item["expert_action"] in item["shown_actions"] and item["expert_action"] in item["admissible_actions"]
        assert set(item["shown_actions"]) <= set(item["admissible_actions"])
        assert all(f"Action {k}: {a}" in item["prompt"] for k, a in enumerate(item["shown_actions"], start=1))
    _, rewards = _score_demos(task, items)
    assert np.all(rewards == [1.0, 0.0, 0.0])
    item = items[0]
    negative = next(a for a in item["shown_actions"] if a != item["expert_action"])
    assert task.score([f"<action>{negative}</action>", "Action: nothing"], [item, item], [1, 1]).tolist() == [
        [0.0, 0.1, 0.0], [0.0, 0.0, -0.5]]


def test_act_tag_rate_sets_the_format_rate_of_demonstrations():
    task = get_task("act_critic", tag_rate=0.1)
    _, rewards = _score_demos(task, task.items("train", 500))
    assert 0.06 < (rewards[:, 2] == 0.0).mean() < 0.14


def test_score_rejects_mismatched_lengths():
    task = get_task("toolcall")
    with pytest.raises(ValueError, match="responses"):
        task.score(["a", "b"], task.items("train", 1), [1, 1])


def _tool_demos(task, items, repeats=1, seed=0):
    rng = np.random.default_rng(seed)
    pairs = [(item, task.demonstration(item, rng)) for _ in range(repeats) for item in items]
    return [item for item, _ in pairs], [demo for _, demo in pairs]


def test_toolcall_near_miss_rates_zero_keep_the_old_demonstrations():
    """At rate 0 the options draw nothing: the demonstrations are those of the code before them, random stream
    included (filler length, then the separator, per demonstration), so earlier warm starts are unchanged."""
    from dara.tasks.toolcall import THINK_FILLER, ToolCallTask

    options = dict(format_rate=0.3, think_filler_max=3)
    task = get_task("toolcall", wrong_key_rate=0.0, wrong_value_rate=0.0, **options)
    items = task.items("train", 300)
    _, demos = _tool_demos(task, items)
    assert demos == _tool_demos(get_task("toolcall", **options), items)[1]
    rng = np.random.default_rng(0)
    old = []
    for item in items:  # the demonstration before wrong_key_rate and wrong_value_rate existed
        n_filler = int(rng.integers(options["think_filler_max"] + 1))
        think = " ".join(THINK_FILLER[:n_filler] + item["plan"].split())
        separator = "\n" if rng.random() < options["format_rate"] else " "
        old.append(ToolCallTask.answer_text(think, item["calls"], separator))
    assert demos == old
    rewards = task.score(demos, items, [1] * len(items))
    with_tool = np.array([bool(item["calls"]) for item in items])
    assert np.all(rewards[with_tool, 1] == 3.0) and np.all(rewards[~with_tool, 1] == 0.0)
    assert all(('"parameters": {' in d) == bool(item["calls"]) and '"args"' not in d for d, item in zip(demos, items))


def test_toolcall_wrong_key_demonstrations_score_minus_three_and_bfcl_reads_no_arguments():
    from dara.evaluation.toolrl_format import decode_calls

    task = get_task("toolcall", format_rate=1.0, wrong_key_rate=1.0)
    items, demos = _tool_demos(task, task.items("train", 200))
    rewards = task.score(demos, items, [1] * len(items))
    with_tool = np.array([bool(item["calls"]) for item in items])
    assert with_tool.sum() > 100 and (~with_tool).sum() > 10
    assert np.all(rewards[with_tool, 1] == -3.0) and np.all(rewards[~with_tool, 1] == 0.0)
    assert np.all(rewards[:, 0] == 1.0)  # the layout is untouched
    for item, demo in zip(items, demos):
        if item["calls"]:
            assert '"args": {' in demo and '"parameters"' not in demo
            assert decode_calls(demo) == [{"name": c["name"], "parameters": {}} for c in item["calls"]]


def test_toolcall_wrong_value_demonstrations_change_exactly_one_argument_for_a_partial_score():
    from dara.evaluation.toolrl_format import decode_calls

    task = get_task("toolcall", format_rate=1.0, wrong_value_rate=1.0)
    items, demos = _tool_demos(task, task.items("train", 200))
    rewards = task.score(demos, items, [1] * len(items))
    changed_names = set()
    for item, demo, reward in zip(items, demos, rewards):
        if not item["calls"]:
            assert reward[1] == 0.0
            continue
        (call,), (decoded,) = item["calls"], decode_calls(demo)
        assert decoded["name"] == call["name"] and set(decoded["parameters"]) == set(call["arguments"])
        differing = [k for k in call["arguments"] if decoded["parameters"][k] != call["arguments"][k]]
        assert len(differing) == 1
        assert type(decoded["parameters"][differing[0]]) is type(call["arguments"][differing[0]])  # same kind
        changed_names.add(differing[0])
        assert -3.0 < reward[1] < 3.0
    assert {"amount", "city", "unit"} <= changed_names  # integers and strings both get a wrong value


@pytest.mark.parametrize("option", ["wrong_key_rate", "wrong_value_rate"])
def test_toolcall_near_miss_rate_is_observed_within_binomial_tolerance(option):
    from dara.evaluation.toolrl_format import decode_calls

    rate = 0.3
    task = get_task("toolcall", **{option: rate})
    items, demos = _tool_demos(task, [i for i in task.items("train", 600) if i["calls"]], repeats=4)
    if option == "wrong_key_rate":
        hits = ['"args": {' in demo for demo in demos]
    else:
        hits = [decode_calls(demo)[0]["parameters"] != item["calls"][0]["arguments"]
                for item, demo in zip(items, demos)]
    n = len(hits)
    assert n >= 2000
    assert abs(np.mean(hits) - rate) < 4 * np.sqrt(rate * (1 - rate) / n)


@pytest.mark.parametrize("option", ["wrong_key_rate", "wrong_value_rate"])
@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_toolcall_near_miss_rates_outside_zero_one_raise(option, value):
    with pytest.raises(ValueError, match=option):
        get_task("toolcall", **{option: value})


def _checks(task, items, seed=0):
    rng = np.random.default_rng(seed)
    return [task.demonstration(item, rng) for item in items]


def test_math_hard_concise_rate_none_answers_hard_items_at_concise_rate():
    items = get_task("math_length").items("train", 300)
    plain = _checks(get_task("math_length", concise_rate=0.3), items)
    assert _checks(get_task("math_length", concise_rate=0.3, hard_sum=10), items) == plain
    with pytest.raises(ValueError, match="hard_concise_rate needs hard_sum"):
        get_task("math_length", concise_rate=0.3, hard_sum=None, hard_concise_rate=0.0)
    assert _checks(get_task("math_length", concise_rate=0.3, hard_sum=10, hard_concise_rate=0.3), items) == plain


def test_math_hard_items_follow_hard_concise_rate():
    task = get_task("math_length", concise_rate=1.0, hard_concise_rate=0.0, hard_sum=14)
    items = task.items("train", 300)
    hard = np.array([item["operands"][0] + item["operands"][1] >= 14 for item in items])
    assert 10 < hard.sum() < len(items) - 10
    checked = np.array(["Check:" in demo for demo in _checks(task, items)])
    assert np.array_equal(checked, hard)
    assert np.all(task.score(_checks(task, items), items, [1] * len(items))[:, 0] == 1.0)


@pytest.mark.parametrize("hard_sum", [19, 20, -1])
def test_math_hard_sum_outside_the_sums_raises(hard_sum):
    with pytest.raises(ValueError, match="hard_sum"):
        get_task("math_length", hard_sum=hard_sum)
    with pytest.raises(ValueError, match="hard_concise_rate"):
        get_task("math_length", hard_sum=10, hard_concise_rate=1.5)


def test_math_slips_write_the_answer_plus_one_at_slip_rate_and_score_wrong():
    items = get_task("math_length").items("train", 600)
    plain = _checks(get_task("math_length", concise_rate=0.3), items)
    # no slip drawn at rate 0: the demonstrations a task without slips always wrote
    assert _checks(get_task("math_length", concise_rate=0.3, slip_rate=0.0), items) == plain
    task = get_task("math_length", concise_rate=0.3, slip_rate=0.4)
    demos = _checks(task, items)
    wrong = task.score(demos, items, [1] * len(items))[:, 0] == 0.0
    slipped = np.array([demo.endswith(f"\\boxed{{{int(item['answer']) + 1}}}") for item, demo in zip(items, demos)])
    assert np.array_equal(wrong, slipped)  # every slip, and only a slip, is scored wrong
    assert abs(slipped.mean() - 0.4) < 4 * np.sqrt(0.4 * 0.6 / len(items))
    for item, demo in zip(items, demos):  # the slip is the second step's, carried into every check
        a, b, c = item["operands"]
        written = demo.rsplit("\\boxed{", 1)[1].rstrip("}")
        assert demo.startswith(f"{a} + {b} = {a + b}. {a + b} - {c} = {written}.")
        assert demo.count(f"- {c} = {written}.") == 1 + demo.count("Check:")
    # slips leave the padding's rate alone: checks at 1 - concise_rate, slipped or not
    checked = np.array(["Check:" in demo for demo in demos])
    for group in (checked[slipped], checked[~slipped]):
        assert abs(group.mean() - 0.7) < 4 * np.sqrt(0.7 * 0.3 / len(group))
    with pytest.raises(ValueError, match="slip_rate"):
        get_task("math_length", slip_rate=1.5)


def test_a_registered_variant_answers_to_its_own_name():
    """toolcall_dense is toolcall's class under another calibration: its items carry its own name (so its runs
    and warm starts stay apart), its rewards are toolcall's two, and a denser format_rate makes compliant
    demonstrations more frequent than toolcall's."""
    dense = get_task("toolcall_dense", format_rate=0.09)
    sparse = get_task("toolcall", format_rate=0.012)
    assert dense.name == "toolcall_dense" and sparse.name == "toolcall"
    assert dense.reward_names == sparse.reward_names == ("format", "correctness")
    assert all(item["id"].startswith("toolcall_dense-") for item in dense.items("train", 8, seed=0))
    assert get_task("toolcall3").name == "toolcall3"
