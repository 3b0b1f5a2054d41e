"""Math rewards: last boxed answer, math-verify correctness in worker processes (timeouts, crashes), length budget.

All tests share the module's one worker pool, so the start-up cost is paid once.
"""

import importlib
import logging
import os
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dara.rewards.math as math_rewards
from dara.rewards.math import correctness_reward, correctness_rewards, last_boxed, length_reward
from dara.rewards.outcome import RewardOutcome
from dara.rewards.worker_pool import WorkerPool, score_with_limits

# ---------------------------------------------------------------- last_boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{5}.", "5"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\left\{1, {2}\right\}}", r"\left\{1, {2}\right\}"),
        (r"first \boxed{1} then \boxed{2}", "2"),
        (r"\boxed {7}", "7"),
        (r"\boxed{}", ""),
        (r"no answer", None),
        (r"\boxed 5", None),  # only the braced form is an answer
        (r"\boxed{3} and \boxed 5", "3"),
        (r"\boxed{1} then cut off \boxed{\frac{1}{", None),  # the last answer never closes
        (r"\boxed{a}}}", "a"),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_last_boxed_rejects_non_text():
    with pytest.raises(TypeError):
        last_boxed(None)


# ---------------------------------------------------------------- correctness


def test_correctness_cases_in_one_batch():
    responses = [
        r"The answer is \boxed{\frac{1}{2}}.",
        r"\boxed{0.5}",
        r"\boxed{3}",
        r"I think 1/2 but I did not box it.",
        r"\boxed{1/2} wait, no: \boxed{2}",  # the last box counts
        r"\boxed{x^2 + 1}",
        r"\boxed{}",
        r"\boxed{\frac{1}{2",  # cut off
    ]
    answers = [r"\frac{1}{2}", "1/2", "4", "1/2", "1/2", "1 + x^2", "1", "1/2"]
    assert correctness_rewards(responses, answers) == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]


def test_correctness_single_item_api():
    assert correctness_reward(r"\boxed{42}", "42") == 1.0
    assert correctness_reward(r"\boxed{41}", "42") == 0.0


def test_empty_batch():
    assert correctness_rewards([], []) == []


@pytest.mark.parametrize(
    ("responses", "answers", "error", "message"),
    [
        ([r"\boxed{1}"], ["1", "2"], ValueError, "1 responses but 2 answers"),
        (r"\boxed{1}", "1", TypeError, "not a single string"),
        ([r"\boxed{1}"], [""], ValueError, "answer 0"),
        ([r"\boxed{1}"], [1], ValueError, "answer 0"),
        ([None], ["1"], TypeError, "response 0"),
    ],
)
def test_correctness_rejects_bad_input(responses, answers, error, message):
    with pytest.raises(error, match=message):
        correctness_rewards(responses, answers)


@pytest.mark.parametrize("bad", [0, -1.0, "5", None, True])
def test_correctness_rejects_bad_timeout(bad):
    with pytest.raises(ValueError, match="timeout_s"):
        correctness_rewards([r"\boxed{1}"], ["1"], timeout_s=bad)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=8))
def test_property_boxed_integers(numbers):
    responses = [f"Reasoning. The answer is \\boxed{{{n}}}." for n in numbers]
    right = correctness_rewards(responses, [str(n) for n in numbers])
    wrong = correctness_rewards(responses, [str(n + 1) for n in numbers])
    assert right == [1.0] * len(numbers)
    assert wrong == [0.0] * len(numbers)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-500, 500), st.integers(1, 500)).filter(lambda pq: Fraction(*pq).denominator != 1),
        min_size=1,
        max_size=8,
    )
)
def test_property_boxed_fractions(fractions):
    values = [Fraction(p, q) for p, q in fractions]
    responses = [
        f"\\boxed{{-\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}}}"
        if v < 0
        else f"\\boxed{{\\frac{{{v.numerator}}}{{{v.denominator}}}}}"
        for v in values
    ]
    right = correctness_rewards(responses, [f"{v.numerator}/{v.denominator}" for v in values])
    wrong = correctness_rewards(responses, [f"{v.numerator + 1}/{v.denominator}" for v in values])
    assert right == [1.0] * len(values)
    assert wrong == [0.0] * len(values)


def test_workers_are_reused_across_calls():
    correctness_rewards([r"\boxed{1}"], ["1"])
    pool = math_rewards._POOL._executor
    correctness_rewards([r"\boxed{2}"] * 4, ["2"] * 4)
    assert math_rewards._POOL._executor is pool


def test_scoring_from_a_non_main_thread():
    # math-verify's signal.alarm cannot run off the main thread; scoring in workers makes that irrelevant.
    results = []
    thread = threading.Thread(target=lambda: results.append(correctness_rewards([r"\boxed{7}"], ["7"])))
    thread.start()
    thread.join(timeout=120)
    assert results == [[1.0]]


# Stand-ins for the scoring function, imported by the worker from this module by name.
def _slow_on_marker(predicted, answer, timeout_s):
    if predicted == "SLOW":
        time.sleep(600)
    return RewardOutcome(1.0 if predicted == answer else 0.0)


def _crash_on_marker(predicted, answer, timeout_s):
    if predicted == "CRASH":
        os._exit(3)
    return RewardOutcome(1.0 if predicted == answer else 0.0)


def test_timeout_scores_zero_with_a_warning_and_replaces_the_worker(monkeypatch, caplog):
    monkeypatch.setattr(math_rewards, "_score_boxed", _slow_on_marker)
    responses = [r"\boxed{a}", r"\boxed{SLOW}", r"\boxed{b}", r"\boxed{c}"]
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="dara.rewards.worker_pool"):
        scores = correctness_rewards(responses, ["a", "SLOW", "b", "x"], timeout_s=1.0)
    assert scores == [1.0, 0.0, 1.0, 0.0]
    assert time.monotonic() - started < 120  # the sleeping worker was killed, not waited for
    assert any("timed out" in record.getMessage() for record in caplog.records)
    # The pool that replaced the stuck one serves later calls.
    assert correctness_rewards([r"\boxed{d}"], ["d"], timeout_s=5.0) == [1.0]


SLOW_TO_IMPORT_SCORER = """
import time
time.sleep(1.5)  # a heavy import, longer than the items' limit


def score(predicted, answer, timeout_s):
    return 1.0 if predicted == answer else 0.0
"""


def test_no_items_limit_pays_for_importing_the_scorers_module(tmp_path, monkeypatch):
    # A worker imports the scorer's module to unpickle it; that import must happen before any item is timed,
    # in the first pool and in one that replaced it.
    (tmp_path / "slow_to_import_scorer.py").write_text(SLOW_TO_IMPORT_SCORER)
    monkeypatch.syspath_prepend(str(tmp_path))
    scorer = importlib.import_module("slow_to_import_scorer").score
    pool = WorkerPool(os.getpid)
    try:
        for _ in range(2):
            scores = [None, None]
            score_with_limits(pool, scorer, [("a", "a"), ("b", "c")], [0, 1], 1.0, scores,
                              failure=lambda reason: reason, what="slow import")
            assert scores == [1.0, 0.0]
            pool.replace()
    finally:
        pool.shutdown()


def test_crashed_worker_is_replaced_and_the_culprit_scores_zero(monkeypatch, caplog):
    monkeypatch.setattr(math_rewards, "_score_boxed", _crash_on_marker)
    responses = [r"\boxed{a}", r"\boxed{CRASH}", r"\boxed{b}"]
    with caplog.at_level(logging.WARNING, logger="dara.rewards.worker_pool"):
        scores = correctness_rewards(responses, ["a", "CRASH", "b"], timeout_s=10.0)
    assert scores == [1.0, 0.0, 1.0]
    assert any("crashed its worker" in record.getMessage() for record in caplog.records)


# A plain script, as a user writes one: no `if __name__ == "__main__":` guard. "spawn" used to re-run it inside the
# worker, whose start then failed (BrokenProcessPool); read from stdin its path `<stdin>` could not be re-run at all.
PLAIN_SCRIPT = """
import multiprocessing
from dara.rewards.math import correctness_outcomes
print("script body ran in", multiprocessing.current_process().name)
outcomes = correctness_outcomes(["so \\\\boxed{\\\\frac{1}{2}}", "\\\\boxed{3}", "no box"], ["0.5", "2", "1"])
print("scores", [outcome.score for outcome in outcomes], "failed", [outcome.failed for outcome in outcomes])
"""


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_plain_script_without_main_guard_scores(tmp_path, source):
    script = tmp_path / "score_answers.py"
    script.write_text(PLAIN_SCRIPT)
    src = str(Path(__file__).resolve().parents[1] / "src")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, str(script)] if source == "file" else [sys.executable, "-"]
    result = subprocess.run(command, input=None if source == "file" else PLAIN_SCRIPT, capture_output=True,
                            text=True, cwd=tmp_path, env=environment, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # The body ran once, in the main process (a worker that re-ran it would print its own name too).
    assert result.stdout.splitlines() == [
        "script body ran in MainProcess",
        "scores [1.0, 0.0, 0.0] failed [False, False, True]",
    ], result.stdout + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def test_pathological_input_is_bounded(caplog):
    # A tower of powers makes sympy work for a long time; the item must come back within its budget (0.0).
    tower = "9^{" * 12 + "9" + "}" * 12
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="dara.rewards.worker_pool"):
        scores = correctness_rewards([f"\\boxed{{{tower}}}", r"\boxed{2}"], ["1", "2"], timeout_s=3.0)
    assert scores == [0.0, 1.0]
    assert time.monotonic() - started < 60


# ---------------------------------------------------------------- length


@pytest.mark.parametrize(("n_tokens", "expected"), [(0, 1.0), (3999, 1.0), (4000, 1.0), (4001, 0.0), (10**6, 0.0)])
def test_length_reward_budget(n_tokens, expected):
    assert length_reward(n_tokens) == expected


def test_length_reward_custom_budget_and_numpy_ints():
    np = pytest.importorskip("numpy")
    assert length_reward(np.int64(10), budget=10) == 1.0
    assert length_reward(11, budget=np.int32(10)) == 0.0


@pytest.mark.parametrize(
    ("n_tokens", "budget", "message"),
    [
        (-1, 4000, "non-negative"),
        (1.5, 4000, "integer"),
        (True, 4000, "integer"),
        ("3", 4000, "integer"),
        (1, -2, "budget"),
    ],
)
def test_length_reward_rejects_bad_counts(n_tokens, budget, message):
    with pytest.raises(ValueError, match=message):
        length_reward(n_tokens, budget=budget)
