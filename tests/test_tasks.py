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
