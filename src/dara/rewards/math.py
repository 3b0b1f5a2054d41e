"""Math rewards: correctness of the last `\\boxed{}` answer, and the response-length budget.

Correctness uses math-verify (`parse`, `verify`). math-verify bounds its own work with `signal.alarm`, which only
works on a process's main thread (trainers call rewards from other threads), and a pathological expression can
still run long, so every item is scored in a persistent worker process with a wall-clock limit per item: an item
over the limit scores 0.0 with a logged warning and its worker is replaced; a worker that dies is replaced too.

Run the batch API from trainers:

    from dara.rewards.math import correctness_rewards
    scores = correctness_rewards(responses, answers)          # list[float] in {0.0, 1.0}
    outcomes = correctness_outcomes(responses, answers)       # the same scores, each with its parse failure

The pool (`dara.rewards.worker_pool`) starts its workers with "spawn" but without re-running the caller's script,
so a plain script needs no `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from numbers import Integral

from dara.rewards.outcome import RewardOutcome
from dara.rewards.worker_pool import WorkerPool, score_with_limits

__all__ = [
    "MAX_BOXED_CHARS",
    "MAX_BOXED_DEPTH",
    "last_boxed",
    "correctness_outcome",
    "correctness_outcomes",
    "correctness_reward",
    "correctness_rewards",
    "length_reward",
    "shutdown_workers",
]


BOXED = "\\boxed"
_BRACE_RUN = re.compile(r"\{+|\}+")
DEFAULT_WORKERS = 1
# A fresh worker imports math-verify and sympy (seconds on a busy machine); that start-up must not count
# against the first item's timeout, so a new pool is warmed up first under this separate limit.
WORKER_STARTUP_TIMEOUT_S = 300.0
# Limits on the boxed answer sent to math-verify. Real answers (fractions, intervals, small matrices) are far
# shorter and shallower; past these, sympy's parser spends the whole timeout or exhausts the worker's stack, so
# such an answer scores 0.0 as unreadable without reaching a worker.
MAX_BOXED_CHARS = 2000
MAX_BOXED_DEPTH = 50


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` in `text`, braces balanced; None if there is none or it never closes.

    Only the braced form is read (`\\boxed 5` is not an answer here).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    search_end = len(text)
    while (start := text.rfind(BOXED, 0, search_end)) >= 0:
        search_end = start
        brace = start + len(BOXED)
        while brace < len(text) and text[brace] == " ":
            brace += 1
        if brace >= len(text) or text[brace] != "{":
            continue  # `\boxed 5` or `\boxedx`: not the braced form, look further left
        # Runs of equal braces at a time: text between braces, and deep nesting, cost no Python step per character.
        depth = 0
        for run in _BRACE_RUN.finditer(text, brace):
            width = run.end() - run.start()
            if text[run.start()] == "{":
                depth += width
            elif width >= depth:  # the run's depth-th closing brace closes the box
                return text[brace + 1 : run.start() + depth - 1]
            else:
                depth -= width
        return None  # the last braced \boxed never closes: the answer is cut off
    return None


def _brace_depth(text: str) -> int:
    depth = deepest = 0
    for character in text:
        if character == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif character == "}":
            depth -= 1
    return deepest


def _parse_for_verify(text: str, what: str, step_timeout: int) -> tuple[list, str | None]:
    """math-verify's parse of `\\boxed{text}`, and why it gave nothing (None when it gave an expression)."""
    from math_verify import parse
    from math_verify.errors import TimeoutException  # a BaseException, so named here

    try:
        parsed = parse(f"\\boxed{{{text}}}", parsing_timeout=step_timeout, raise_on_error=True)
    except (Exception, TimeoutException) as error:
        return [], f"math-verify could not parse the {what} ({type(error).__name__})"
    return parsed, None if parsed else f"math-verify found no expression in the {what}"


def _score_boxed(predicted: str, answer: str, timeout_s: float) -> RewardOutcome:
    """Runs in a worker process: math-verify on `\\boxed{predicted}` against `\\boxed{answer}`."""
    from math_verify import verify

    # Three alarm-bounded steps (two parses, one verify) share the item's budget; alarm takes whole seconds.
    step_timeout = max(1, int(timeout_s // 3))
    gold, gold_failure = _parse_for_verify(answer, "reference answer", step_timeout)
    prediction, prediction_failure = _parse_for_verify(predicted, "boxed answer", step_timeout)
    if gold_failure or prediction_failure:
        return RewardOutcome.failure(0.0, gold_failure or prediction_failure)
    # verify's own errors and timeouts (an expression too large to compare) are a wrong answer, as in math-verify.
    return RewardOutcome(1.0 if verify(gold, prediction, timeout_seconds=step_timeout) else 0.0)


def _warm_up() -> int:
    """Runs in a new worker: load and exercise math-verify once so the first real item is not charged for it."""
    from math_verify import parse, verify

    verify(parse("\\boxed{1}"), parse("\\boxed{1}"))
    return os.getpid()


_POOL = WorkerPool(_warm_up, workers=DEFAULT_WORKERS, startup_timeout_s=WORKER_STARTUP_TIMEOUT_S)


def shutdown_workers() -> None:
    """Stop the scoring workers now (they are also stopped at interpreter exit)."""
    _POOL.shutdown()


def _check_timeout(timeout_s: float) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")


def _unreadable_boxed(boxed: str | None) -> str | None:
    """Why a boxed answer is not sent to math-verify, or None when it is."""
    if boxed is None:
        return "no closed \\boxed{} answer"
    if not boxed.strip():
        return "empty \\boxed{} answer"
    if len(boxed) > MAX_BOXED_CHARS:
        return f"boxed answer of {len(boxed)} characters exceeds the {MAX_BOXED_CHARS}-character limit"
    if _brace_depth(boxed) > MAX_BOXED_DEPTH:
        return f"boxed answer nests braces deeper than {MAX_BOXED_DEPTH} levels"
    return None


def correctness_outcomes(
    responses: Sequence[str], answers: Sequence[str], timeout_s: float = 5.0
) -> list[RewardOutcome]:
    """`correctness_rewards`, each score with the reason it could not be read (`RewardOutcome.parse_failure`).

    Parse failures (score 0.0): no closed or an empty `\\boxed{}`, a boxed answer over `MAX_BOXED_CHARS`
    characters or `MAX_BOXED_DEPTH` brace levels, an answer (or reference) math-verify cannot parse or gives no
    expression for, an item past `timeout_s`, or a worker that crashed on it. A wrong answer is not a failure.
    """
    if isinstance(responses, str) or isinstance(answers, str):
        raise TypeError("responses and answers must be sequences of strings, not a single string")
    if len(responses) != len(answers):
        raise ValueError(f"{len(responses)} responses but {len(answers)} answers")
    _check_timeout(timeout_s)
    scores: list[RewardOutcome | None] = [None] * len(responses)
    jobs: list[tuple[str, str]] = []
    pending = []
    for index, (response, answer) in enumerate(zip(responses, answers)):
        if not isinstance(response, str):
            raise TypeError(f"response {index} must be a str, got {type(response).__name__}")
        if not isinstance(answer, str) or not answer.strip():
            raise ValueError(f"answer {index} must be a non-empty str, got {answer!r}")
        boxed = last_boxed(response)
        jobs.append((boxed or "", answer))
        unreadable = _unreadable_boxed(boxed)
        if unreadable is not None:
            scores[index] = RewardOutcome.failure(0.0, unreadable)
        else:
            pending.append(index)
    score_with_limits(_POOL, _score_boxed, jobs, pending, timeout_s, scores,
                      failure=lambda reason: RewardOutcome.failure(0.0, reason), what="math correctness")
    return scores


def correctness_rewards(responses: Sequence[str], answers: Sequence[str], timeout_s: float = 5.0) -> list[float]:
    """1.0 where the last `\\boxed{}` of a response verifies against its answer (math-verify), else 0.0.

    A response without a closed `\\boxed{}` scores 0.0 without reaching a worker, as does a boxed answer over the
    limits `MAX_BOXED_CHARS` / `MAX_BOXED_DEPTH`. Each item gets `timeout_s` seconds of wall clock; past it the
    item scores 0.0 and a warning is logged. One persistent pool of worker processes (`DEFAULT_WORKERS`) serves
    every call in this process. `correctness_outcomes` also says which items could not be read.
    """
    return [outcome.score for outcome in correctness_outcomes(responses, answers, timeout_s=timeout_s)]


def correctness_outcome(response: str, answer: str, timeout_s: float = 5.0) -> RewardOutcome:
    """One item of `correctness_outcomes`."""
    return correctness_outcomes([response], [answer], timeout_s=timeout_s)[0]


def correctness_reward(response: str, answer: str, timeout_s: float = 5.0) -> float:
    """One item of `correctness_rewards`."""
    return correctness_outcome(response, answer, timeout_s=timeout_s).score


def length_reward(n_tokens: int, budget: int = 4000) -> float:
    """1.0 when the response has at most `budget` tokens, else 0.0 (the math study's length channel)."""
    for name, value in (("n_tokens", n_tokens), ("budget", budget)):
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ValueError(f"{name} must be an integer token count, got {value!r}")
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be non-negative, got {n_tokens}")
    if budget < 0:
        raise ValueError(f"budget must be non-negative, got {budget}")
    return 1.0 if n_tokens <= budget else 0.0
