"""Scoring in persistent worker processes with a wall-clock limit per item (used by `dara.rewards.math`).

A scorer that can hang in C code (sympy inside math-verify) or crash its process cannot be bounded inside the
caller: `signal.alarm` only works on a main thread, and trainers call rewards from others. So each item runs in a
worker of a lazily started "spawn" process pool. An item over its limit scores the caller's failure outcome and the
pool is replaced (a stuck worker is killed); an item whose worker dies is rescored alone in a fresh pool, so it
either scores or is the culprit. Items that finished before a replacement keep their results.

Workers are started without re-running the caller's script (`caller_script_hidden`), so a plain script that scores
needs no `if __name__ == "__main__":` guard.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import pickle
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from concurrent.futures.process import BrokenProcessPool
from typing import Any

logger = logging.getLogger(__name__)

_SPAWN_LOCK = threading.Lock()


@contextlib.contextmanager
def caller_script_hidden() -> Iterator[None]:
    """While workers start, `sys.modules["__main__"]` is an empty module.

    "spawn" tells each new process to import the parent's `__main__` again (by path for a script, by name for
    `python -m`). A plain script without an `if __name__ == "__main__":` guard would then run again inside the
    worker, call the reward, try to start a pool during the worker's start-up and kill it (`BrokenProcessPool`);
    a script read from stdin has the path `<stdin>`, which cannot be imported. The workers need nothing from the
    caller's script (they import the scorer's module by name), so they are started without it. The swap lasts only
    while processes are launched; another thread importing `__main__` in that window would see the empty module.
    """
    with _SPAWN_LOCK:
        caller_main = sys.modules.get("__main__")
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            if caller_main is None:
                del sys.modules["__main__"]
            else:
                sys.modules["__main__"] = caller_main


class WorkerPool:
    """One lazily started process pool per process, replaced when a worker hangs or dies.

    ``warm_up`` runs once in every new worker before the pool is used (e.g. importing a heavy library), under
    ``startup_timeout_s``, so that no item's limit pays for a worker's start. The same holds for a scorer's
    modules: `get(scorer)` has every worker load it first, once per pool.
    """

    def __init__(self, warm_up: Callable[[], Any], *, workers: int = 1, startup_timeout_s: float = 300.0) -> None:
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self._owner_pid: int | None = None
        self._loaded_scorers: set[bytes] = set()
        self.warm_up = warm_up
        self.workers = workers
        self.startup_timeout_s = startup_timeout_s
        atexit.register(self.shutdown)

    def get(self, scorer: Callable[..., Any] | None = None) -> ProcessPoolExecutor:
        """The live pool, started if need be, whose workers have loaded ``scorer`` (imported its modules)."""
        with self._lock:
            if self._executor is None or self._owner_pid != os.getpid():
                # A forked child must not use its parent's pool; it starts its own.
                # "spawn": trainers hold threads and CUDA state that a forked worker must not inherit.
                # A spawn pool starts one worker per submit until it has `workers`, so the warm-ups launch them all.
                with caller_script_hidden():
                    executor = ProcessPoolExecutor(
                        max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
                    )
                    warm_ups = [executor.submit(self.warm_up) for _ in range(self.workers)]
                for warm_up in warm_ups:
                    warm_up.result(timeout=self.startup_timeout_s)
                self._executor, self._owner_pid = executor, os.getpid()
                self._loaded_scorers = set()
            # A worker imports a scorer's module when it first unpickles the scorer; on a loaded machine that import
            # (a test module with pytest and hypothesis: about 0.5 s idle) alone overran a 1 s item limit. Keyed by
            # the pickle, which names the modules it needs (a partial's function's too).
            pickled = None if scorer is None else pickle.dumps(scorer)
            if pickled is not None and pickled not in self._loaded_scorers:
                loads = [self._executor.submit(_worker_pid, scorer) for _ in range(self.workers)]
                for loaded in loads:
                    loaded.result(timeout=self.startup_timeout_s)
                self._loaded_scorers.add(pickled)
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


def _worker_pid(_scorer: Callable[..., Any]) -> int:
    """Runs in a worker, which imported the scorer's modules to unpickle the argument."""
    return os.getpid()


def score_with_limits(pool: WorkerPool, scorer: Callable[..., Any], jobs: Sequence[tuple], pending: list[int],
                      timeout_s: float, scores: list, failure: Callable[[str], Any], what: str) -> None:
    """Fill ``scores[i] = scorer(*jobs[i], timeout_s)`` for every index in ``pending``, each within ``timeout_s``
    of wall clock; an item that times out, crashes its worker or raises gets ``failure(reason)`` and a warning
    naming ``what``. ``scorer`` must be importable by name (it is pickled to the workers)."""
    while pending:
        pending = _run_scored(pool, scorer, jobs, pending, timeout_s, scores, failure, what)


def _run_scored(pool, scorer, jobs, pending, timeout_s, scores, failure, what) -> list[int]:
    """Score `pending` in the pool until one item hangs or a worker dies; returns the indices still to score.

    Results are collected in submission order, so with one worker each wait covers exactly one item's run
    (with more workers an item may have had longer, never less).
    """
    executor = pool.get(scorer)
    futures = [(index, executor.submit(scorer, *jobs[index], timeout_s)) for index in pending]
    for position, (index, future) in enumerate(futures):
        try:
            scores[index] = future.result(timeout=timeout_s)
        except FutureTimeoutError:
            logger.warning("%s timed out after %.1f s (item %d); scored as a failure", what, timeout_s, index)
            scores[index] = failure(f"scoring timed out after {timeout_s:g} s")
            pool.replace()
        except BrokenProcessPool:
            pool.replace()
            _score_alone(pool, scorer, jobs, index, timeout_s, scores, failure, what)
        except Exception as error:  # raised by the scoring code in the worker; the worker itself is fine
            logger.warning("%s raised %s (item %d); scored as a failure", what, type(error).__name__, index)
            scores[index] = failure(f"scoring raised {type(error).__name__}: {error}")
            continue
        else:
            continue
        return [later for later, later_future in futures[position + 1 :] if not _harvest(later_future, later, scores)]
    return []


def _harvest(future: Future, index: int, scores: list) -> bool:
    """Keep the result of an item that finished before its pool was replaced."""
    if future.done() and not future.cancelled() and future.exception() is None:
        scores[index] = future.result()
        return True
    return False


def _score_alone(pool, scorer, jobs, index, timeout_s, scores, failure, what) -> None:
    """After a worker died, rescore its item alone in a fresh pool: it scores, or it is the culprit."""
    future = pool.get(scorer).submit(scorer, *jobs[index], timeout_s)
    try:
        scores[index] = future.result(timeout=timeout_s)
    except (FutureTimeoutError, BrokenProcessPool) as error:
        reason = f"timed out after {timeout_s:g} s" if isinstance(error, FutureTimeoutError) else "crashed its worker"
        logger.warning("%s %s (item %d); scored as a failure", what, reason, index)
        scores[index] = failure(f"scoring {reason}")
        pool.replace()
    except Exception as error:
        logger.warning("%s raised %s (item %d); scored as a failure", what, type(error).__name__, index)
        scores[index] = failure(f"scoring raised {type(error).__name__}: {error}")
