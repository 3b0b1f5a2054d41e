"""ACT composite reward: normalisation, action extraction, and each part of R = R_acc + R_adm + R_fmt."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dara.rewards.act import ActReward, composite, extract_action, normalize_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Go North", "go north"),
        ("  go\t\n north  ", "go north"),
        ("TAKE Key 1 FROM drawer", "take key 1 from drawer"),
        ("STRASSE", "strasse"),
        ("Straße", "strasse"),  # casefold, not lower
        ("", ""),
    ],
)
def test_normalize_action(text, expected):
    assert normalize_action(text) == expected


@given(st.text())
def test_normalize_action_is_idempotent(text):
    assert normalize_action(normalize_action(text)) == normalize_action(text)


def test_normalize_action_rejects_non_text():
    with pytest.raises(TypeError):
        normalize_action(None)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<action>go north</action>", "go north"),
        ("think... <action>\n  open door \n</action>", "open door"),
        ("<action>a</action> then <action>b</action>", "b"),
        ("<action>a</action> then <action>b", "a"),  # the last block that closes
        ("<action>a <action>b</action>", "b"),  # an unclosed opening tag does not swallow the next block
        ("<action>a</action> stray </action>", "a"),
        ("<action></action>", ""),
        ("no tag", None),
        ("<Action>go</Action>", None),  # tags are case-sensitive
        ("</action>go<action>", None),
    ],
)
def test_extract_action(response, expected):
    assert extract_action(response) == expected


def test_extract_action_custom_tag():
    assert extract_action("<answer>B</answer><action>x</action>", tag="answer") == "B"
    with pytest.raises(ValueError, match="tag"):
        extract_action("<a>x</a>", tag="<a>")


ADMISSIBLE = ["go north", "go south", "open door"]


@pytest.mark.parametrize(
    ("response", "admissible", "expected"),
    [
        ("<action>Go  North</action>", ADMISSIBLE, ActReward(1.0, 0.0, 0.0, 1.0)),
        ("<action>go north</action>", None, ActReward(1.0, 0.0, 0.0, 1.0)),
        ("<action>GO SOUTH</action>", ADMISSIBLE, ActReward(0.0, 0.1, 0.0, 0.1)),
        ("<action>go south</action>", None, ActReward(0.0, 0.0, 0.0, 0.0)),  # open action space
        ("<action>fly</action>", ADMISSIBLE, ActReward(0.0, 0.0, 0.0, 0.0)),
        ("<action></action>", ADMISSIBLE, ActReward(0.0, 0.0, 0.0, 0.0)),
        ("go north", ADMISSIBLE, ActReward(0.0, 0.0, -0.5, -0.5)),  # no tag: semantic parts are 0
        ("<action>go north", ADMISSIBLE, ActReward(0.0, 0.0, -0.5, -0.5)),
    ],
)
def test_composite_parts(response, admissible, expected):
    assert composite(response, "Go North", admissible) == expected


def test_composite_admissible_set_is_normalised_and_any_iterable():
    reward = composite("<action>open door</action>", "go north", (action.upper() for action in ADMISSIBLE))
    assert reward.admissible == 0.1


def test_composite_rejects_bad_arguments():
    with pytest.raises(ValueError, match="expert_action"):
        composite("<action>x</action>", "   ")
    with pytest.raises(TypeError, match="single string"):
        composite("<action>x</action>", "x", "x")


@given(
    response=st.text(max_size=40) | st.builds(lambda a: f"<action>{a}</action>", st.sampled_from(ADMISSIBLE + ["fly"])),
    expert=st.sampled_from(ADMISSIBLE),
    admissible=st.none() | st.just(ADMISSIBLE),
)
def test_composite_total_is_the_sum_of_known_values(response, expert, admissible):
    reward = composite(response, expert, admissible)
    assert reward.total == reward.accuracy + reward.admissible + reward.format
    assert reward.total in (-0.5, 0.0, 0.1, 1.0)
    assert not (reward.accuracy and reward.admissible)
