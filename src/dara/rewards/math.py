"""Math rewards: correctness of the last `\\boxed{}` answer, and the response-length budget.

Correctness uses math-verify (`parse`, `verify`). math-verify bounds its own work with `signal.alarm`, which only
works on a process's main thread (trainers call rewards from other threads), and a pathological expression can
still run long, so every item is scored in a persistent worker process with a wall-clock limit per item: an item
over the limit scores 0.0 with a logged warning and its worker is replaced; a worker that dies is replaced too.

Run the batch API from trainers:

    from dara.rewards.math import correctness_rewards
    scores = correctness_rewards(responses, answers)          # list[float] in {0.0, 1.0}
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from concurrent.futures.process import BrokenProcessPool
from numbers import Integral

__all__ = ["last_boxed", "correctness_reward", "correctness_rewards", "length_reward", "shutdown_workers"]

logger = logging.getLogger(__name__)

BOXED = "\\boxed"
DEFAULT_WORKERS = 1
# A fresh worker imports math-verify and sympy (seconds on a busy machine); that start-up must not count
# against the first item's timeout, so a new pool is warmed up first under this separate limit.
WORKER_STARTUP_TIMEOUT_S = 300.0


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
        depth = 0
        for position in range(brace, len(text)):
            if text[position] == "{":
                depth += 1
            elif text[position] == "}":
                depth -= 1
                if depth == 0:
                    return text[brace + 1 : position]
        return None  # the last braced \boxed never closes: the answer is cut off
    return None


def _score_boxed(predicted: str, answer: str, timeout_s: float) -> float:
    """Runs in a worker process: math-verify on `\\boxed{predicted}` against `\\boxed{answer}`."""
    from math_verify import parse, verify

    # Three alarm-bounded steps (two parses, one verify) share the item's budget; alarm takes whole seconds.
    step_timeout = max(1, int(timeout_s // 3))
    gold = parse(f"\\boxed{{{answer}}}", parsing_timeout=step_timeout)
    prediction = parse(f"\\boxed{{{predicted}}}", parsing_timeout=step_timeout)
    if not gold or not prediction:
        return 0.0
    return 1.0 if verify(gold, prediction, timeout_seconds=step_timeout) else 0.0


def _warm_up() -> int:
    """Runs in a new worker: load and exercise math-verify once so the first real item is not charged for it."""
    from math_verify import parse, verify

    verify(parse("\\boxed{1}"), parse("\\boxed{1}"))
    return os.getpid()


class _WorkerPool:
    """One lazily started process pool per process, replaced when a worker hangs or dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._owner_pid: int | None = None
        self.workers = DEFAULT_WORKERS

    def get(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._executor is None or self._owner_pid != os.getpid():
                # A forked child must not use its parent's pool; it starts its own.
                # "spawn": trainers hold threads and CUDA state that a forked worker must not inherit.
                executor = ProcessPoolExecutor(
                    max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
                )
                warm_ups = [executor.submit(_warm_up) for _ in range(self.workers)]
                for warm_up in warm_ups:
                    warm_up.result(timeout=WORKER_STARTUP_TIMEOUT_S)
                self._executor, self._owner_pid = executor, os.getpid()
            return self._executor

    def replace(self) -> None:
        """Kill the workers (one may be stuck in C code) and drop the pool; the next `get` starts a fresh one."""
        with self._lock:
            executor, self._executor = self._executor, None
            if executor is None or self._owner_pid != os.getpid():
                return
            # Python 3.11 has no public way to stop a running task; the executor's process table is the handle.
            for process in list(getattr(executor, "_processes", {}).values()):
                process.kill()
            executor.shutdown(wait=True, cancel_futures=True)

    def shutdown(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
            if executor is not None and self._owner_pid == os.getpid():
                executor.shutdown(wait=True, cancel_futures=True)


_POOL = _WorkerPool()
atexit.register(_POOL.shutdown)


def shutdown_workers() -> None:
    """Stop the scoring workers now (they are also stopped at interpreter exit)."""
    _POOL.shutdown()


def _check_timeout(timeout_s: float) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")


def _run_scored(
    pending: list[int], jobs: list[tuple[str, str]], timeout_s: float, scores: list[float | None]
) -> list[int]:
    """Score `pending` in the pool until one item hangs or a worker dies; returns the indices still to score.

    Results are collected in submission order, so with one worker each wait covers exactly one item's run
    (with more workers an item may have had longer, never less).
    """
    executor = _POOL.get()
    futures = [(index, executor.submit(_score_boxed, *jobs[index], timeout_s)) for index in pending]
    for position, (index, future) in enumerate(futures):
        try:
            scores[index] = future.result(timeout=timeout_s)
        except FutureTimeoutError:
            logger.warning("math correctness timed out after %.1f s (item %d); scored 0.0", timeout_s, index)
            scores[index] = 0.0
            _POOL.replace()
        except BrokenProcessPool:
            _POOL.replace()
            _score_alone(index, jobs, timeout_s, scores)
        else:
            continue
        return [later for later, later_future in futures[position + 1 :] if not _harvest(later_future, later, scores)]
    return []


def _harvest(future: Future[float], index: int, scores: list[float | None]) -> bool:
    """Keep the result of an item that finished before its pool was replaced."""
    if future.done() and not future.cancelled() and future.exception() is None:
        scores[index] = future.result()
        return True
    return False


def _score_alone(index: int, jobs: list[tuple[str, str]], timeout_s: float, scores: list[float | None]) -> None:
    """After a worker died, rescore its item alone in a fresh pool: it scores, or it is the culprit."""
    future = _POOL.get().submit(_score_boxed, *jobs[index], timeout_s)
    try:
        scores[index] = future.result(timeout=timeout_s)
    except (FutureTimeoutError, BrokenProcessPool) as error:
        reason = "timed out" if isinstance(error, FutureTimeoutError) else "crashed its worker"
        logger.warning("math correctness %s (item %d); scored 0.0", reason, index)
        scores[index] = 0.0
        _POOL.replace()


def correctness_rewards(responses: Sequence[str], answers: Sequence[str], timeout_s: float = 5.0) -> list[float]:
    """1.0 where the last `\\boxed{}` of a response verifies against its answer (math-verify), else 0.0.

    A response without a closed `\\boxed{}` scores 0.0 without reaching a worker. Each item gets `timeout_s`
    seconds of wall clock; past it the item scores 0.0 and a warning is logged. One persistent pool of worker
    processes (`DEFAULT_WORKERS`) serves every call in this process.
    """
    if isinstance(responses, str) or isinstance(answers, str):
        raise TypeError("responses and answers must be sequences of strings, not a single string")
    if len(responses) != len(answers):
        raise ValueError(f"{len(responses)} responses but {len(answers)} answers")
    _check_timeout(timeout_s)
    scores: list[float | None] = [None] * len(responses)
    jobs: list[tuple[str, str]] = []
    pending = []
    for index, (response, answer) in enumerate(zip(responses, answers)):
        if not isinstance(response, str):
            raise TypeError(f"response {index} must be a str, got {type(response).__name__}")
        if not isinstance(answer, str) or not answer.strip():
            raise ValueError(f"answer {index} must be a non-empty str, got {answer!r}")
        boxed = last_boxed(response)
        jobs.append((boxed or "", answer))
        if boxed is None or not boxed.strip():
            scores[index] = 0.0
        else:
            pending.append(index)
    while pending:
        pending = _run_scored(pending, jobs, timeout_s, scores)
    return [float(score) for score in scores]


def correctness_reward(response: str, answer: str, timeout_s: float = 5.0) -> float:
    """One item of `correctness_rewards`."""
    return correctness_rewards([response], [answer], timeout_s=timeout_s)[0]


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
