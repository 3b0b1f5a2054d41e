"""Profile the tiny trainer against one core's measured arithmetic and memory limits: a roofline, with numbers.

Run: ``make profile-trainer`` or, under the kernel pin as every benchmark,
``pin=$(.venv/bin/python -m dara.kernels env) && env $pin .venv/bin/python -m benchmarks.profile_trainer
--out docs/results/profile_trainer.md`` (about a minute on an idle core; ``--policy`` names another warm start).

Everything runs in one process on one thread (``torch.set_num_threads(1)``), as the workflow's jobs do:

1. **The core's limits.** fp32 GEMM GFLOP/s (a large square ``torch.mm``, best of several) and memory bandwidth (a
   large tensor copy, bytes read + written, best of several), both under the process's kernel dispatch (under the pin:
   MKL's COMPATIBLE branch, so this is the pinned trainer's own ceiling, not the CPU's vector peak); and the GEMM rate
   at the policy's own shapes (64 hidden units: how much of the peak small matrices can reach).
2. **One RL step** of the tiny trainer (``dara.tiny.trainer.train``, the experiment's settings for one run, default
   toolcall / dara_sym / G8 / seed 0 as ``make bench-trainer``), from a warm-start policy. The same steps are trained
   three times from the same policy and seed, which draws the same responses (checked: the metrics other than
   ``seconds`` must agree): once timed, once under ``torch.utils.flop_counter.FlopCounterMode`` and a byte counter
   (`OpBytes`), once under ``torch.profiler``. The first ``--warmup`` steps of each pass are left out. Phases as
   ``benchmarks.bench_trainer`` splits them: sampling, log-prob passes outside the update (the KL reference), the
   update (forward, backward, AdamW), and the rest (decoding, rewards, advantages).
3. **One supervised (warm-start) step**: ``dara.tiny.warmstart``'s loop (its ``supervised_batch``, ``sft_loss``,
   AdamW, gradient clipping, one-cycle schedule) at the experiment's batch size, continuing from the warm-start
   policy's weights (the cost of a step depends on the shapes, not on the weights), measured the same three ways.

What is counted. FLOPs are FlopCounterMode's: matrix products (``mm``, ``addmm``, ``bmm``, attention) as 2 x m x n x k,
forward and backward, with torch's SDPA formulas added for SDPA's CPU kernel (`CPU_ATTENTION_FLOPS`); elementwise
work, softmax and norms count nothing. Bytes are `OpBytes`'s: every ATen op that
is not a view reads each input tensor and writes each output once, whole, as if no cache kept anything between ops:
the traffic of a machine without caches, an upper bound on what must come from memory (the policy's weights, about
0.5 MB, stay in a core's L2 cache). The "arithmetic limit" of a phase is its FLOPs at the measured GEMM peak, the
"memory limit" its bytes at the measured bandwidth, the roofline limit the larger of the two. Times (the steps' and
the limits') are this process's CPU time, which leaves out what other processes on a shared machine take from the core
(their share of caches and memory bandwidth it does not); the wall time is shown beside it. The ATen share is the
summed self CPU time of the ``aten::`` ops in the profile over the profiled wall time (the rest: Python, the trainer's
own code, Hugging Face's module code, the autograd engine and the profiler's cost); an ATen op's self time includes its
own dispatch, so this share over-states the time in arithmetic kernels.

The benchmark history (``benchmarks/history.py``, ``docs/results/bench_history.csv``) takes only the benchmarks it
names and units without GFLOP/s or GB/s, so this profile is not recorded there: its view is the record.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
import unittest.mock
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, flop_registry, sdpa_backward_flop_count, sdpa_flop_count

ROOT = Path(__file__).resolve().parents[1]
# How the core's GEMM rates are measured, per library of the policy's linear layers (dara.tiny.gemm).
GEMM_CALLS = {"torch": "`torch.mm` calls", "openblas": "OpenBLAS products (numpy's, as `dara.tiny.gemm` calls them)"}
PASSES = ("time", "count", "profile")
# the RL step's phases: wrapped trainer functions (as bench_trainer wraps them) and their names in the view
RL_PHASES = {"sampling": "sampling", "logprobs": "log-probs outside the update", "update": "update",
             "other": "other (decoding, rewards, advantages)"}
SFT_PHASES = {"batch": "batch (demonstrations, tokenization)", "forward": "forward and loss", "backward": "backward",
              "optimizer": "optimizer (clipping, AdamW, schedule)", "other": "other"}
# A phase within this factor of its roofline limit is arithmetic-bound; farther, it is overhead-bound where less than
# OVERHEAD_SHARE of its time is in ATen ops, else kernel-bound (ATen kernels well below the peak: small shapes,
# elementwise work, softmax).
NEAR_LIMIT = 2.0
OVERHEAD_SHARE = 0.5
# What a phase's verdict points at (docs/performance.md gives the reasons): candidates, not measured gains. An
# arithmetic-bound phase gains only from fewer FLOPs or a faster GEMM; an overhead-bound one from fewer calls; a
# kernel-bound one from the ATen work besides the counted products and from fewer products.
ARITHMETIC_LEVER = "fewer FLOPs (less padding, a smaller LM head) or a faster GEMM branch than the pin's"
PHASE_LEVERS: dict[tuple[str, str], dict[str, str]] = {
    ("rl", "sampling"): {
        "overhead-bound": "a static KV cache with a compiled decode step (torch.compile: fewer, fused calls per "
                          "token), fused sampling, several runs' rollouts batched in one process (more rows for the "
                          "same calls)",
        "kernel-bound": "fused sampling (softmax, cumulative sum and draw in one pass over the vocabulary), a "
                        "compiled decode step fusing its elementwise work, the attention products over the cache"},
    ("rl", "logprobs"): {
        "overhead-bound": "torch.compile of the reference forward, several runs batched in one process",
        "kernel-bound": "fewer products: the layers run on every position of the padded width, after EOS too; "
                        "attention's softmax and masking (see the top events)"},
    ("rl", "update"): {
        "overhead-bound": "torch.compile of the forward and backward, a fused AdamW, fewer and larger minibatches or "
                          "several runs batched (larger matrices for the same calls)",
        "kernel-bound": "fewer products: the padded positions after EOS, forward and backward; attention's "
                        "elementwise work; torch.compile to fuse the elementwise chains (mul, add, copies)"},
    ("rl", "other"): {"any": "the Python around the model: batched decoding of responses, vectorised reward scoring"},
    ("sft", "batch"): {"any": "demonstrations and tokenization prepared ahead (another process) or cached"},
    ("sft", "forward"): {
        "overhead-bound": "larger SFT batches (the same calls, more rows each), torch.compile of the forward",
        "kernel-bound": "attention's softmax and masking, fused elementwise work (torch.compile), larger SFT batches"},
    ("sft", "backward"): {
        "overhead-bound": "larger SFT batches, torch.compile of the forward and backward",
        "kernel-bound": "attention's backward elementwise work, fused elementwise work (torch.compile), larger SFT "
                        "batches"},
    ("sft", "optimizer"): {"any": "a fused AdamW (one kernel for all parameters), larger SFT batches (fewer steps "
                                  "for the same demonstrations)"},
    ("sft", "other"): {"any": "nothing: the loop itself"},
}


def lever(step: str, phase: str, verdict_found: str) -> str | None:
    """The candidate levers of ``phase`` of the ``step`` (``rl`` or ``sft``) given its verdict."""
    if verdict_found == "arithmetic-bound":
        return ARITHMETIC_LEVER
    levers = PHASE_LEVERS.get((step, phase), {})
    return levers.get(verdict_found, levers.get("any"))


# ---------------------------------------------------------------------------------------------------------------
# the core's limits


def _best_seconds(run: Callable[[], Any], repeats: int, min_seconds: float) -> float:
    """The fastest of ``repeats`` timings of ``run`` in this process's CPU time (as the steps are timed), each averaged
    over enough calls to last ``min_seconds``."""
    run()  # warm: first-call allocation and page faults
    started = time.process_time()
    run()
    once = max(time.process_time() - started, 1e-6)
    calls = max(1, math.ceil(min_seconds / once))
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(calls):
            run()
        best = min(best, max(time.process_time() - started, 1e-9) / calls)
    return best


def gemm_gflops(m: int, k: int, n: int, repeats: int = 5, min_seconds: float = 0.05, library: str = "torch") -> float:
    """fp32 GFLOP/s of ``(m, k) @ (k, n)`` (2 m k n FLOPs a call), best of ``repeats``: ``torch.mm`` into a
    preallocated output, or with ``library`` "openblas" the product as `dara.tiny.gemm` computes a linear layer's
    (numpy's OpenBLAS, the second operand a transposed weight)."""
    if library == "openblas":
        from dara.tiny import gemm

        a, weight = torch.randn(m, k).numpy(), torch.randn(n, k).numpy()
        return 2 * m * k * n / _best_seconds(lambda: gemm._matmul(a, weight.T), repeats, min_seconds) / 1e9
    a, b, out = torch.randn(m, k), torch.randn(k, n), torch.empty(m, n)
    return 2 * m * k * n / _best_seconds(lambda: torch.mm(a, b, out=out), repeats, min_seconds) / 1e9


def copy_gbps(megabytes: int, repeats: int = 5) -> float:
    """GB/s of copying a ``megabytes`` MiB fp32 tensor into another (its size read plus its size written, the STREAM
    convention; a write-allocating cache also reads the destination, which is not counted), best of ``repeats``."""
    elements = megabytes * 2**20 // 4
    source, destination = torch.ones(elements), torch.empty(elements)
    return 2 * elements * 4 / _best_seconds(lambda: destination.copy_(source), repeats, 0.0) / 1e9


def measure_limits(gemm_sizes: list[int], copy_megabytes: int, repeats: int, library: str = "torch") -> dict[str, Any]:
    """Square GEMMs of each size (with ``library``, the policy's: `gemm_gflops`) and the copy bandwidth; the GEMM peak
    is set later, from every GEMM measured (`set_gemm_peak`)."""
    squares = [{"case": f"square, {n}^3", "m": n, "k": n, "n": n,
                "gflops": gemm_gflops(n, n, n, repeats, library=library)} for n in gemm_sizes]
    return {"squares": squares, "copy_megabytes": copy_megabytes, "copy_gbps": copy_gbps(copy_megabytes, repeats),
            "repeats": repeats, "library": library}


def set_gemm_peak(limits: dict[str, Any], gemms: list[dict[str, Any]]) -> dict[str, Any]:
    """``limits`` with the GEMM peak: the highest rate of all the GEMMs measured (the square ones and ``gemms``, the
    policy's shapes; MKL may reach more on the policy's shapes than on a large square one)."""
    best = max([*limits["squares"], *gemms], key=lambda g: g["gflops"])
    return {**limits, "gemm_gflops": best["gflops"], "gemm_case": best["case"]}


def policy_gemm_rates(hidden: int, intermediate: int, vocab: int, decode_rows: int, token_rows: int,
                      repeats: int = 5, library: str = "torch") -> list[dict[str, Any]]:
    """GFLOP/s of the policy's own matrix shapes: a decoding step's rows (one token per response) and an update
    minibatch's (its response tokens) through the MLP's up projection and the LM head."""
    shapes = [("decoding step, MLP up projection", decode_rows, hidden, intermediate),
              ("decoding step, LM head", decode_rows, hidden, vocab),
              ("update minibatch, MLP up projection", token_rows, hidden, intermediate),
              ("update minibatch, LM head", token_rows, hidden, vocab)]
    return [{"case": case, "m": m, "k": k, "n": n,
             "gflops": gemm_gflops(m, k, n, repeats, min_seconds=0.02, library=library)} for case, m, k, n in shapes]


# ---------------------------------------------------------------------------------------------------------------
# counting: FLOPs (FlopCounterMode) and bytes (OpBytes)


def _tensor_bytes(tensor: torch.Tensor) -> int:
    """The bytes a tensor spans: its elements, but no more than its storage (an expanded tensor repeats elements)."""
    try:
        storage = tensor.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        storage = math.inf
    return int(min(tensor.numel() * tensor.element_size(), storage))


class OpBytes(TorchDispatchMode):
    """Counts the bytes ATen ops read and write: for every op that is not a view (a return aliasing an input without
    writing it) nor an allocation (``empty``), the size of each tensor input plus each tensor output. In-place ops
    count their operand as read and as written. ``total`` is the running sum; ``calls`` the ops counted."""

    def __init__(self):
        super().__init__()
        self.total = 0
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        is_view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        if not is_view and not schema.name.split("::")[-1].startswith(("empty", "new_empty")):
            inputs, _ = tree_flatten((args, kwargs or {}))
            outputs, _ = tree_flatten(out)
            self.total += sum(_tensor_bytes(t) for t in (*inputs, *outputs) if isinstance(t, torch.Tensor))
            self.calls += 1
        return out


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward_flops(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                                  **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


# FlopCounterMode has formulas for SDPA's CUDA kernels, not for its CPU kernel (the Hugging Face forward's attention
# here), which it would count as 0: torch's own SDPA formulas for it (full query x key products, causal or not),
# unless a later torch brings its own.
CPU_ATTENTION_FLOPS = {op: formula for op, formula in {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_attention_backward_flops,
}.items() if op not in flop_registry}


class _GlobalOnly:
    """In place of FlopCounterMode's ModuleTracker: every count goes to "Global", no module hooks."""

    parents = frozenset({"Global"})

    def __enter__(self):
        return self

    def __exit__(self, *args):
        return None


class _CountAsDispatched(TorchDispatchMode):
    """FlopCounterMode's dispatch mode, but running each op as CPU dispatch would. An op reaches the mode undecomposed
    where autograd did not decompose it (under ``torch.inference_mode``: ``linear``, ``matmul``, SDPA); FlopCounterMode
    then runs its CompositeImplicitAutograd decomposition, so that the products inside are counted, but does so also
    for an op that has a CPU kernel of its own (here ``silu_backward``), whose decomposition rounds differently: the
    counted pass would train other numbers than the timed one. Here an op with its own CPU kernel runs whole (it is
    elementwise: no FLOPs either way; such ops are named in ``run_whole`` for the view), any other is decomposed as
    CPU dispatch would."""

    def __init__(self, counter: "StepFlopCounter"):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func._overloadpacket not in self.counter.flop_registry
                and func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)):
            if func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CPU):
                self.counter.run_whole.add(str(func._overloadpacket))
            else:
                with self:
                    decomposed = func.decompose(*args, **kwargs)
                if decomposed is not NotImplemented:
                    return decomposed
        out = func(*args, **kwargs)
        return self.counter._count_flops(func._overloadpacket, out, args, kwargs)


class StepFlopCounter(FlopCounterMode):
    """FlopCounterMode's formulas and totals (with `CPU_ATTENTION_FLOPS`), each op run as CPU dispatch would run it
    (`_CountAsDispatched`), and
    without the per-module breakdown: the ModuleTracker behind it registers hooks on every module call that fail on
    modules called under ``torch.inference_mode`` (the sampler's embedding and rotary modules)."""

    def __init__(self):
        super().__init__(display=False, custom_mapping=CPU_ATTENTION_FLOPS)
        self.mod_tracker = _GlobalOnly()
        self.run_whole: set[str] = set()

    def __enter__(self):
        self.flop_counts.clear()
        self.mode = _CountAsDispatched(self)
        self.mode.__enter__()
        return self


# The key OpenBLAS's products are counted under (dara.tiny.gemm: they run in numpy, where no dispatch mode sees them).
OPENBLAS_OP = "openblas.sgemm"


def wrapping_openblas(wrap: Callable[[Callable], Callable]):
    """`dara.tiny.gemm._matmul`, the one place OpenBLAS's products run (in numpy, where no dispatch mode or profiler
    range sees them), replaced by ``wrap(_matmul)`` inside the ``with`` block."""
    from dara.tiny import gemm

    return unittest.mock.patch.object(gemm, "_matmul", wrap(gemm._matmul))


@contextlib.contextmanager
def counting() -> Iterator[tuple[FlopCounterMode, OpBytes]]:
    """`StepFlopCounter` and `OpBytes` active together, and OpenBLAS's products (a policy with ``matmul: openblas``)
    counted into both as FlopCounterMode counts ``mm``: 2 m k n FLOPs under `OPENBLAS_OP` (per product of a stacked
    call: attention's), the bytes of both operands and the product."""

    def counted(product):
        def count(a, b):
            out = product(a, b)
            # 2 m k n per product, times the stacked products of a batched call (attention's)
            flops.flop_counts["Global"][OPENBLAS_OP] += 2 * out.size * a.shape[-1]
            moved.total += a.nbytes + b.nbytes + out.nbytes
            moved.calls += 1
            return out
        return count

    with StepFlopCounter() as flops, OpBytes() as moved, wrapping_openblas(counted):
        yield flops, moved


# The profiler's label for OpenBLAS's products (`labelled_openblas`), counted with the ATen ops' self time.
OPENBLAS_EVENT = "openblas::sgemm"


def labelled_openblas():
    """Each OpenBLAS product in a profiler range named `OPENBLAS_EVENT`: it would otherwise count as Python time."""

    def labelled(product):
        def label(a, b):
            with torch.profiler.record_function(OPENBLAS_EVENT):
                return product(a, b)
        return label

    return wrapping_openblas(labelled)


def flop_counts_by_op(flops: FlopCounterMode) -> dict[str, int]:
    """The counter's totals per ATen op (``aten.mm``, ...)."""
    return {str(op).removesuffix(".default"): int(n) for op, n in flops.get_flop_counts().get("Global", {}).items()}


# ---------------------------------------------------------------------------------------------------------------
# phases of a step, measured one way per pass


class PhaseMeter:
    """Splits steps into named phases, one way per pass: ``time`` (CPU and wall seconds), ``count`` (FLOPs and bytes
    of the active counters) or ``profile`` (torch.profiler over the measured steps, each phase a ``phase:<name>``
    range).

    Steps are numbered by `begin_step` calls; the first ``warmup`` are run but not recorded, the next ``steps`` are.
    A phase entered inside another phase counts as the outer one (token_logprobs inside the update is update work).
    What a step spends outside its phases is its ``other``."""

    def __init__(self, kind: str, phases: list[str], warmup: int, steps: int):
        if kind not in PASSES:
            raise ValueError(f"a pass is one of {PASSES}, not {kind!r}")
        if steps < 1 or warmup < 0:
            raise ValueError(f"measure at least one step after a warm-up of zero or more (got {steps}, {warmup})")
        self.kind, self.phases, self.warmup, self.steps = kind, list(phases), warmup, steps
        self.step = -1
        self.records: list[dict[str, dict[str, float]]] = []
        self.flops: FlopCounterMode | None = None
        self.moved: OpBytes | None = None
        self.profiler: torch.profiler.profile | None = None
        self.window_seconds = 0.0
        self.ops_at_start: dict[str, int] = {}
        self.ops_in_window: dict[str, int] = {}
        self._inside: str | None = None
        self._current: dict[str, dict[str, float]] = {}
        self._step_start: dict[str, float] = {}
        self._window_start = 0.0
        self.run_whole: list[str] = []

    @property
    def measuring(self) -> bool:
        return self.warmup <= self.step < self.warmup + self.steps

    def _reading(self) -> dict[str, float]:
        # seconds: this process's CPU time, what the step costs the core whatever else runs on the machine (one
        # compute thread; a tokenizer's helper threads count too); wall_seconds beside it
        return {"seconds": time.process_time(), "wall_seconds": time.perf_counter(),
                "flops": float(self.flops.get_total_flops()) if self.flops is not None else 0.0,
                "bytes": float(self.moved.total) if self.moved is not None else 0.0}

    def begin_step(self) -> None:
        self.step += 1
        if not self.measuring:
            return
        if self.step == self.warmup:
            if self.flops is not None:
                self.ops_at_start = flop_counts_by_op(self.flops)
            if self.profiler is not None:
                self.profiler.start()
            self._window_start = time.perf_counter()
        self._current = {phase: dict.fromkeys(self._step_start_keys, 0.0) for phase in self.phases}
        self._step_start = self._reading()

    def end_step(self) -> None:
        if not self.measuring:
            return
        now = self._reading()
        total = {key: now[key] - self._step_start[key] for key in now}
        record = dict(self._current)
        record["other"] = {key: total[key] - sum(self._current[p][key] for p in self.phases) for key in total}
        record["step"] = total
        self.records.append(record)
        if self.step == self.warmup + self.steps - 1:
            self.window_seconds = time.perf_counter() - self._window_start
            if self.profiler is not None:
                self.profiler.stop()
            if self.flops is not None:
                self.ops_in_window = {op: n - self.ops_at_start.get(op, 0)
                                      for op, n in flop_counts_by_op(self.flops).items()}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in self.phases:
            raise ValueError(f"{name!r} is not one of the phases {self.phases}")
        if self._inside is not None or not self.measuring:
            yield
            return
        self._inside = name
        start = self._reading()
        label = torch.profiler.record_function(f"phase:{name}") if self.kind == "profile" else contextlib.nullcontext()
        try:
            with label:
                yield
        finally:
            now = self._reading()
            for key in now:
                self._current[name][key] += now[key] - start[key]
            self._inside = None

    @contextlib.contextmanager
    def measured(self) -> Iterator["PhaseMeter"]:
        """The pass's instruments around the code that runs the steps."""
        if self.kind == "count":
            with counting() as (self.flops, self.moved):
                yield self
            self.run_whole = sorted(self.flops.run_whole)
        elif self.kind == "profile":
            self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            with labelled_openblas():
                yield self
        else:
            yield self
        if len(self.records) != self.steps:
            raise RuntimeError(f"{self.kind} pass recorded {len(self.records)} steps, not {self.steps} (the run "
                               f"stopped after {self.step + 1} of {self.warmup} + {self.steps} steps)")

    _step_start_keys = ("seconds", "wall_seconds", "flops", "bytes")

    def mean(self, phase: str, key: str) -> float:
        """The per-step mean of ``key`` (seconds of CPU time, wall_seconds, flops, bytes) of ``phase`` (a phase,
        ``other`` or ``step``)."""
        return sum(r[phase][key] for r in self.records) / len(self.records)


def profile_split(profiler: torch.profiler.profile, phases: list[str], window_seconds: float,
                  top: int = 10) -> dict[str, Any]:
    """From a profile whose phases are ``phase:<name>`` ranges: per phase (and ``other``, outside every phase) its
    wall seconds and the self CPU seconds of the ``aten::`` ops (and of OpenBLAS's products, `OPENBLAS_EVENT`) inside
    it; the whole window's; the top ops by self time (the phase ranges left out)."""
    events = profiler.events()
    phase_of: dict[int, str | None] = {}

    def enclosing_phase(event) -> str | None:
        chain, found = [], None
        while event is not None:
            if id(event) in phase_of:
                found = phase_of[id(event)]
                break
            chain.append(event)
            if event.name.startswith("phase:"):
                found = event.name.removeprefix("phase:")
                break
            event = event.cpu_parent
        for seen in chain:
            phase_of[id(seen)] = found
        return found

    wall = {phase: 0.0 for phase in phases}
    aten = {phase: 0.0 for phase in [*phases, "other"]}
    for event in events:
        if event.name.startswith("phase:"):
            wall[event.name.removeprefix("phase:")] += event.cpu_time_total / 1e6
        elif event.name.startswith("aten::") or event.name == OPENBLAS_EVENT:
            aten[enclosing_phase(event) or "other"] += event.self_cpu_time_total / 1e6
    wall["other"] = max(window_seconds - sum(wall.values()), 0.0)
    split = {phase: {"seconds": wall[phase], "aten_seconds": aten[phase],
                     "aten_share": min(aten[phase] / wall[phase], 1.0) if wall[phase] > 0 else 0.0}
             for phase in [*phases, "other"]}
    total_aten = sum(aten.values())
    split["step"] = {"seconds": window_seconds, "aten_seconds": total_aten,
                     "aten_share": min(total_aten / window_seconds, 1.0) if window_seconds > 0 else 0.0}
    averages = [a for a in profiler.key_averages() if not a.key.startswith("phase:")]
    averages.sort(key=lambda a: a.self_cpu_time_total, reverse=True)
    top_ops = [{"op": a.key, "calls": int(a.count), "self_seconds": a.self_cpu_time_total / 1e6,
                "share": a.self_cpu_time_total / 1e6 / window_seconds if window_seconds > 0 else 0.0}
               for a in averages[:top]]
    return {"phases": split, "top_ops": top_ops}


def summarise(passes: dict[str, PhaseMeter], phases: list[str], peak: dict[str, Any]) -> dict[str, Any]:
    """Per phase, per step: CPU and wall seconds (the timed pass), FLOPs and bytes (the counted pass), their limits
    at the measured peak and bandwidth, the ratio of the CPU time to the roofline limit, the ATen share (the
    profiled pass) and a verdict."""
    timed, counted, profiled = passes["time"], passes["count"], passes["profile"]
    split = profile_split(profiled.profiler, phases, profiled.window_seconds)
    rows = {}
    for phase in [*phases, "other", "step"]:
        seconds, flops, moved = (timed.mean(phase, "seconds"), counted.mean(phase, "flops"),
                                 counted.mean(phase, "bytes"))
        wall = timed.mean(phase, "wall_seconds")
        arithmetic = flops / (peak["gemm_gflops"] * 1e9)
        memory = moved / (peak["copy_gbps"] * 1e9)
        limit = max(arithmetic, memory)
        profile = split["phases"][phase]
        ratio = seconds / limit if limit > 0 else math.inf
        rows[phase] = {"seconds": seconds, "wall_seconds": wall, "flops": flops, "bytes": moved,
                       "arithmetic_limit": arithmetic, "memory_limit": memory, "ratio": ratio,
                       "achieved_gflops": flops / seconds / 1e9 if seconds > 0 else 0.0,
                       "intensity": flops / moved if moved > 0 else 0.0,
                       "profiled_seconds": profile["seconds"] / profiled.steps,
                       "aten_share": profile["aten_share"], "verdict": verdict(ratio, profile["aten_share"])}
    return {"phases": rows, "top_ops": split["top_ops"], "run_whole": counted.run_whole,
            "peak_gflops": peak["gemm_gflops"], "flops_by_op": {
        op: n / counted.steps for op, n in sorted(counted.ops_in_window.items(), key=lambda kv: -kv[1]) if n},
        "profiled_window_seconds": profiled.window_seconds, "timed_window_seconds": timed.window_seconds,
        "steps": timed.steps}


def verdict(ratio: float, aten_share: float) -> str:
    """arithmetic-bound (within NEAR_LIMIT of the roofline), else overhead-bound (under OVERHEAD_SHARE of the time
    in ATen ops) or kernel-bound; ``no work`` for a phase that counted no FLOPs or bytes."""
    if math.isinf(ratio):
        return "no work counted"
    if ratio <= NEAR_LIMIT:
        return "arithmetic-bound"
    return "overhead-bound" if aten_share < OVERHEAD_SHARE else "kernel-bound"


# ---------------------------------------------------------------------------------------------------------------
# the RL step


def measure_rl(run, policy: str | Path, *, warmup: int, steps: int) -> dict[str, Any]:
    """Train ``run`` (a `dara.runs.Run` of the tiny backend; its settings' ``steps`` replaced by warmup + steps)
    from ``policy`` three times in temporary folders (timed, counted, profiled): the passes (`summarise` them) and
    what the run was."""
    import dara.tiny.trainer as trainer

    torch.set_num_threads(1)
    run = dataclasses.replace(run, settings={**run.settings, "steps": warmup + steps})
    phases = [p for p in RL_PHASES if p != "other"]
    passes: dict[str, PhaseMeter] = {}
    frames = {}
    originals = {name: getattr(trainer, name) for name in ("rollout", "token_logprobs", "ppo_update")}
    meter: PhaseMeter | None = None

    def sampling(*args, **kwargs):
        meter.begin_step()
        with meter.phase("sampling"):
            return originals["rollout"](*args, **kwargs)

    def logprobs(*args, **kwargs):
        with meter.phase("logprobs"):
            return originals["token_logprobs"](*args, **kwargs)

    def update(*args, **kwargs):
        with meter.phase("update"):
            result = originals["ppo_update"](*args, **kwargs)
        meter.end_step()
        return result

    try:
        trainer.rollout, trainer.token_logprobs, trainer.ppo_update = sampling, logprobs, update
        for kind in PASSES:
            meter = PhaseMeter(kind, phases, warmup, steps)
            with tempfile.TemporaryDirectory() as results, meter.measured():
                frames[kind] = trainer.train(dataclasses.replace(run, results=results), policy=str(policy),
                                             progress=False)
            passes[kind] = meter
    finally:
        for name, original in originals.items():
            setattr(trainer, name, original)
    measured = frames["time"].iloc[warmup:]
    same = all(frames[kind].drop(columns="seconds").equals(frames["time"].drop(columns="seconds"))
               for kind in PASSES[1:])
    return {"passes": passes, "phases": phases, "run": run.name, "responses": run.settings["responses_per_step"],
            "group_size": run.group_size, "warmup": warmup, "same_steps": same,
            "response_length": float(measured["response_length"].mean()),
            "max_new_tokens": run.settings["max_new_tokens"], "minibatches": run.settings["minibatches"],
            "kl_coef": run.settings["kl_coef"]}


# ---------------------------------------------------------------------------------------------------------------
# the supervised (warm-start) step


def measure_sft(policy: str | Path, task_name: str, task_options: dict[str, Any], *, batch_size: int,
                corpus_items: int, seed: int, learning_rate: float, warmup: int, steps: int) -> dict[str, Any]:
    """``dara.tiny.warmstart.warm_start``'s supervised loop, continued from ``policy``'s weights for warmup + steps
    steps, three times (timed, counted, profiled) from the same weights and demonstrations: the passes (`summarise`
    them) and what the steps were."""
    import numpy as np

    from dara.tasks import get_task
    from dara.tiny.policy import load_policy
    from dara.tiny.warmstart import sft_loss, supervised_batch

    torch.set_num_threads(1)
    task = get_task(task_name, **task_options)
    items = task.items("train", corpus_items, seed=seed)
    phases = [p for p in SFT_PHASES if p != "other"]
    passes, losses, answer_tokens = {}, {}, []
    for kind in PASSES:
        tokenizer, policy_model = load_policy(policy)
        prompts = [item["prompt"] for item in items]
        prompt_ids = dict(zip(prompts, tokenizer(prompts, add_special_tokens=False)["input_ids"]))
        torch.manual_seed(seed)
        rng = np.random.default_rng([seed, 1])
        optimizer = torch.optim.AdamW(policy_model.parameters(), lr=learning_rate, weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=learning_rate,
                                                       total_steps=warmup + steps, pct_start=0.1)
        policy_model.train()
        meter = PhaseMeter(kind, phases, warmup, steps)
        losses[kind] = []
        with meter.measured():
            for _ in range(warmup + steps):
                meter.begin_step()
                with meter.phase("batch"):
                    chosen = rng.choice(len(items), size=batch_size, replace=False)
                    ids, attention, loss_mask = supervised_batch(tokenizer, task, [items[i] for i in chosen], rng,
                                                                 prompt_ids)
                with meter.phase("forward"):
                    loss = sft_loss(policy_model, ids, attention, loss_mask)
                with meter.phase("optimizer"):
                    optimizer.zero_grad(set_to_none=True)
                with meter.phase("backward"):
                    loss.backward()
                with meter.phase("optimizer"):
                    torch.nn.utils.clip_grad_norm_(policy_model.parameters(), 1.0)
                    optimizer.step()
                    schedule.step()
                meter.end_step()
                losses[kind].append(loss.item())
                if kind == "time" and meter.step >= warmup:
                    answer_tokens.append(float(loss_mask.sum()))
        passes[kind] = meter
    return {"passes": passes, "phases": phases, "task": task_name, "batch_size": batch_size, "warmup": warmup,
            "same_steps": losses["count"] == losses["time"] == losses["profile"],
            "answer_tokens": sum(answer_tokens) / len(answer_tokens)}


# ---------------------------------------------------------------------------------------------------------------
# the model's arithmetic per token


def model_arithmetic(model) -> dict[str, Any]:
    """The policy's sizes and its forward FLOPs per token by hand: 2 x the decoder layers' matrix weights, 2 x vocab
    x hidden for the (tied) LM head, and attention's two products, 4 x hidden x layers per token of context."""
    config = model.config
    layer_weights = sum(m.weight.numel() for layer in model.model.layers for m in layer.modules()
                        if isinstance(m, torch.nn.Linear))
    return {"parameters": sum(p.numel() for p in model.parameters()), "layer_weights": layer_weights,
            "vocab": config.vocab_size, "hidden": config.hidden_size, "layers": config.num_hidden_layers,
            "intermediate": config.intermediate_size, "heads": config.num_attention_heads,
            "kv_heads": config.num_key_value_heads, "layer_flops": 2 * layer_weights,
            "head_flops": 2 * config.vocab_size * config.hidden_size,
            "attention_flops_per_context_token": 4 * config.hidden_size * config.num_hidden_layers}


# ---------------------------------------------------------------------------------------------------------------
# the view


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def _ratio(x: float) -> str:
    return "-" if math.isinf(x) else f"{x:,.0f}x" if x >= 100 else f"{x:.1f}x"


def _phase_table(summary: dict[str, Any], names: dict[str, str]) -> list[str]:
    lines = ["| phase | CPU time (ms/step) | wall (ms/step) | share of step | GFLOP | achieved GFLOP/s | arithmetic "
             "limit (ms) | measured / arithmetic limit | MB moved (upper bound) | memory limit (ms) | measured / "
             "roofline limit | ATen share (profiled) | verdict |", "|" + "---|" * 13]
    rows = summary["phases"]
    step = rows["step"]["seconds"]
    for phase in [*names, "step"]:
        row = rows[phase]
        name = names.get(phase, "**whole step**")
        lines.append(f"| {name} | {_ms(row['seconds'])} | {_ms(row['wall_seconds'])} | {row['seconds'] / step:.0%} | "
                     f"{row['flops'] / 1e9:.3f} | "
                     f"{row['achieved_gflops']:.2f} | {row['arithmetic_limit'] * 1e3:.2f} | "
                     f"{_ratio(row['seconds'] / row['arithmetic_limit'] if row['arithmetic_limit'] else math.inf)} | "
                     f"{row['bytes'] / 1e6:.1f} | {row['memory_limit'] * 1e3:.2f} | {_ratio(row['ratio'])} | "
                     f"{row['aten_share']:.0%} | {row['verdict']} |")
    return lines


def _top_ops(summary: dict[str, Any]) -> list[str]:
    window = summary["profiled_window_seconds"]
    lines = [f"Top 10 profiler events by self CPU time over the {summary['steps']} profiled steps ({_ms(window)} ms "
             "in all): ATen ops, autograd nodes (their self time: the engine's and the node's own work outside the "
             "ATen ops they call) and labelled ranges such as the optimizer's; the phase ranges left out.", "",
             "| event | calls per step | self time (ms/step) | share of the profiled time |", "|---|---|---|---|"]
    for op in summary["top_ops"]:
        lines.append(f"| `{op['op']}` | {op['calls'] / summary['steps']:.0f} | "
                     f"{_ms(op['self_seconds'] / summary['steps'])} | {op['share']:.1%} |")
    flops = summary["flops_by_op"]
    total = sum(flops.values())
    if total:
        lines += ["", "FLOPs by op (FlopCounterMode, per step): " + ", ".join(
            f"`{op}` {n / 1e9:.3f} GFLOP ({n / total:.0%})" for op, n in flops.items()) + "."]
    if summary["run_whole"]:
        lines += ["", "Run by their own CPU kernel in the counted pass, where FlopCounterMode would run their "
                      "decomposition (which rounds differently; no FLOPs either way): " + ", ".join(
                          f"`{op}`" for op in summary["run_whole"]) + "."]
    return lines


def _interpretation(summary: dict[str, Any], names: dict[str, str], what: str, step_kind: str) -> list[str]:
    step = summary["phases"]["step"]
    bound = "memory limit" if step["memory_limit"] > step["arithmetic_limit"] else "arithmetic limit"
    lines = [
        f"{what} took {_ms(step['seconds'])} ms of CPU time ({_ms(step['wall_seconds'])} ms wall). Its "
        f"{step['flops'] / 1e9:.3f} GFLOP would take {step['arithmetic_limit'] * 1e3:.2f} ms at the measured GEMM "
        f"peak, its {step['bytes'] / 1e6:.1f} MB (counted as if nothing stayed in cache) "
        f"{step['memory_limit'] * 1e3:.2f} ms at the measured bandwidth: the roofline limit is the {bound}, and the "
        f"step's CPU time is {_ratio(step['ratio'])} that, "
        f"{step['achieved_gflops']:.2f} GFLOP/s, {step['achieved_gflops'] / summary['peak_gflops']:.1%} of the "
        f"peak. Under the profiler {step['aten_share']:.0%} of the wall time was the self time of ATen ops and "
        f"{1 - step['aten_share']:.0%} was outside them (Python, module and dispatch code, the autograd engine, the "
        f"profiler's own cost: the profiled steps took {_ms(summary['profiled_window_seconds'] / summary['steps'])} "
        f"ms each against {_ms(summary['timed_window_seconds'] / summary['steps'])} ms timed).",
        "",
        f"By this page's rule (within {NEAR_LIMIT:g}x of the roofline limit: arithmetic-bound; farther, with under "
        f"{OVERHEAD_SHARE:.0%} of the time in ATen ops: overhead-bound; else kernel-bound):", ""]
    for phase, name in names.items():
        row = summary["phases"][phase]
        candidates = lever(step_kind, phase, row["verdict"])
        lines.append(f"- {name}: {row['verdict']} ({_ratio(row['ratio'])} its limit, {row['aten_share']:.0%} in "
                     f"ATen ops, {row['seconds'] / step['seconds']:.0%} of the step)"
                     + (f"; candidates: {candidates}." if candidates else "."))
    if not summary["same_steps"]:
        lines += ["", "**The three passes did not train the same steps** (their metrics differ): the FLOPs, the time "
                      "and the profile describe different work."]
    return lines


def render(result: dict[str, Any]) -> str:
    """The whole Markdown view of a profile (`profile`'s result)."""
    peak, machine, arithmetic = result["peak"], result["machine"], result["model"]
    dispatch, cpu = machine["dispatch"], machine["cpu"]
    variables = " ".join(f"{k}={v}" for k, v in dispatch["variables"].items() if v is not None) or "unpinned"
    flags = ", ".join(flag for flag, present in cpu["flags"].items() if present) or "none of " + ", ".join(cpu["flags"])
    rl, sft = result["rl"], result["sft"]
    lines = [
        f"# Profile of the tiny trainer ({result['date']})", "",
        f"Written by `{result['command']}` (`benchmarks/profile_trainer.py`; docs/performance.md explains the page). "
        f"One process, one thread; revision {result['revision']}.", "",
        f"- CPU: {cpu['model_name']} (family {cpu['family']}, model {cpu['model']}; {flags}), "
        f"{cpu['logical_cpus']} logical CPUs; 1-minute load average {result['load'][0]:.2f} at the start, "
        f"{result['load'][1]:.2f} at the end (this process counts 1 of it there; other processes share the cores, "
        "caches and memory bandwidth: the timings, not the counts, move with the load)",
        f"- Kernel dispatch: {variables}; ATen {dispatch.get('aten_cpu_capability')}, MKL branch "
        f"{dispatch.get('mkl_cbwr_branch')}, OpenBLAS {dispatch.get('openblas_core')} kernels, torch "
        f"{dispatch.get('torch')}, {dispatch.get('torch_threads')} thread(s)",
        "", "## The core's limits", "",
        f"Each rate is the best of {peak['repeats']} timings. The GEMM peak is the highest rate of the fp32 "
        f"{GEMM_CALLS[peak.get('library', 'torch')]} below (the large square ones and the policy's own shapes; the "
        f"policy's linear layers compute with {peak.get('library', 'torch')}, `dara.tiny.gemm`): "
        f"**{peak['gemm_gflops']:.1f} GFLOP/s** ({peak['gemm_case']}); the memory bandwidth is a copy of "
        f"{peak['copy_megabytes']} MiB fp32, counted as read + written: **{peak['copy_gbps']:.1f} GB/s**.", "",
        "| GEMM | shape | GFLOP/s | share of the peak |", "|---|---|---|---|"]
    lines += [f"| {g['case']} | {g['m']} x {g['k']} @ {g['k']} x {g['n']} | {g['gflops']:.1f} | "
              f"{g['gflops'] / peak['gemm_gflops']:.0%} |" for g in [*peak["squares"], *result["policy_gemms"]]]
    lines += [
        "", "## The model's arithmetic", "",
        f"{arithmetic['parameters']:,} parameters (vocabulary {arithmetic['vocab']}, hidden {arithmetic['hidden']}, "
        f"{arithmetic['layers']} layers of {arithmetic['heads']} query and {arithmetic['kv_heads']} key/value heads, "
        f"MLP {arithmetic['intermediate']}, tied embeddings); {arithmetic['layer_weights']:,} of them are the "
        f"decoder layers' matrices. A token's forward costs {arithmetic['layer_flops']:,} FLOPs in the layers "
        f"(2 x their weights), {arithmetic['head_flops']:,} in the LM head where it is scored (2 x vocabulary x "
        f"hidden) and {arithmetic['attention_flops_per_context_token']:,} per token of context in attention "
        f"(4 x hidden x layers); a backward about twice the forward.", "",
        f"## RL step: {rl['run']}", "",
        f"{rl['responses']} responses a step in groups of {rl['group_size']}, at most {rl['max_new_tokens']} new "
        f"tokens, {rl['response_length']:.1f} tokens on average over the measured steps; {rl['minibatches']} PPO "
        f"minibatches; KL coefficient {rl['kl_coef']:g} (a reference forward outside the update when above 0). "
        f"{rl['steps']} steps measured after {rl['warmup']} warm-up step(s), each pass "
        f"{'training the same steps (metrics equal)' if rl['same_steps'] else 'NOT training the same steps'}.", ""]
    lines += (_phase_table(rl, RL_PHASES) + [""] + _interpretation(rl, RL_PHASES, "An RL step", "rl") + [""]
              + _top_ops(rl))
    lines += [
        "", f"## Supervised (warm-start) step: {sft['task']}", "",
        f"Batches of {sft['batch_size']} demonstrations, {sft['answer_tokens']:.0f} answer tokens a batch on "
        f"average; {sft['steps']} steps measured after {sft['warmup']} warm-up step(s), continuing from the "
        f"warm-start policy's weights, each pass "
        f"{'training the same steps (losses equal)' if sft['same_steps'] else 'NOT training the same steps'}.", ""]
    lines += (_phase_table(sft, SFT_PHASES) + [""] + _interpretation(sft, SFT_PHASES, "A supervised step", "sft") + [""]
              + _top_ops(sft))
    lines += ["", "Counted FLOPs are matrix products only (FlopCounterMode; OpenBLAS's products as "
                  f"`{OPENBLAS_OP}`); MB moved counts every non-view ATen op's (and OpenBLAS product's) "
                  "inputs and outputs once, as if no cache kept anything (an upper bound on memory traffic); the ATen "
                  "share is the profiled self time of `aten::` ops, their own dispatch included, and of OpenBLAS's "
                  f"products (`{OPENBLAS_EVENT}`)."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# the command line


def ensure_policy(policy: Path, experiment: str, task: str, warm_start: int, scratch: Path) -> Path:
    """``policy`` when it holds a checkpoint; else warm start ``warm_start`` of ``task`` made now (``python -m
    dara.tiny.warmstart``, in this process's environment, so under its pin) into ``scratch``."""
    if (policy / "config.json").is_file():
        return policy
    made = scratch / f"warm_start{warm_start}"
    print(f"no policy under {policy}: making warm start {warm_start} of {task} into {made}", file=sys.stderr,
          flush=True)
    subprocess.run([sys.executable, "-m", "dara.tiny.warmstart", "--experiment", experiment, "--task", task,
                    "--warm-start", str(warm_start), "--out", str(made)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return made


def profile(run, policy: Path, warm_start: dict[str, Any], *, warmup: int, steps: int, sft_warmup: int,
            sft_steps: int, gemm_sizes: list[int], copy_megabytes: int, repeats: int) -> dict[str, Any]:
    """Every measurement of the page (the machine record, the limits, the RL and the supervised step)."""
    from dara.kernels import machine_record
    from dara.tiny.policy import load_policy

    torch.set_num_threads(1)
    machine = machine_record()  # a process marked as pinned and not pinned stops here (dara.kernels.enforce_pin)
    load_before = os.getloadavg()[0]
    from dara.tiny.gemm import matmul_of

    _, model = load_policy(policy)
    library = matmul_of(model.config)
    limits = measure_limits(gemm_sizes, copy_megabytes, repeats, library)
    rl = measure_rl(run, policy, warmup=warmup, steps=steps)
    sft = measure_sft(policy, warm_start["task_name"], warm_start["task_options"],
                      batch_size=warm_start["sft_batch_size"], corpus_items=warm_start["corpus_items"],
                      seed=warm_start["seed"], learning_rate=warm_start["sft_learning_rate"], warmup=sft_warmup,
                      steps=sft_steps)
    arithmetic = model_arithmetic(model)
    gemms = policy_gemm_rates(arithmetic["hidden"], arithmetic["intermediate"], arithmetic["vocab"],
                              decode_rows=rl["responses"],
                              token_rows=round(rl["responses"] * rl["response_length"] / rl["minibatches"]),
                              repeats=repeats, library=library)
    peak = set_gemm_peak(limits, gemms)
    summaries = {name: {**summarise(raw.pop("passes"), raw.pop("phases"), peak), **raw}
                 for name, raw in (("rl", rl), ("sft", sft))}
    # the machine's load beside this process (1-minute averages, which lag): timings on a shared machine move with it
    return {"machine": machine, "load": (load_before, os.getloadavg()[0]), "peak": peak, "model": arithmetic,
            "policy_gemms": gemms, **summaries}


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that name the measured run of an experiment and its warm start (`ensure_policy`)."""
    parser.add_argument("--policy", type=Path, default=None,
                        help="warm-start checkpoint (default: the run's, results/tiny/policies/toolcall/warm_start0 "
                             "for the default run; made into a temporary folder when missing)")
    parser.add_argument("--experiment", default="tiny")
    parser.add_argument("--task", default="toolcall")
    parser.add_argument("--method", default="dara_sym")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--warmup", type=int, default=1, help="RL steps run before the measured ones")
    parser.add_argument("--steps", type=int, default=3, help="RL steps measured per pass")
    parser.add_argument("--sft-warmup", type=int, default=2)
    parser.add_argument("--sft-steps", type=int, default=10)
    parser.add_argument("--gemm-sizes", type=int, nargs="+", default=[512, 1024, 1536],
                        help="square GEMM sizes timed for the peak")
    parser.add_argument("--copy-mb", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5, help="timings of each limit (the best is kept)")
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown view here "
                        "(make profile-trainer: docs/results/profile_trainer.md)")
    args = parser.parse_args(argv)
    from dara.experiments import load_experiment, warm_start_settings
    from dara.provenance import git_revision
    from dara.runs import find_run

    experiment = load_experiment(args.experiment)
    run = find_run(experiment, args.task, args.method, args.group_size, args.seed)
    warm_start = warm_start_settings(experiment, args.task, run.warm_start)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        policy = ensure_policy(args.policy or ROOT / run.policy_dir, args.experiment, args.task, run.warm_start,
                               Path(scratch))
        result = profile(run, policy, warm_start, warmup=args.warmup, steps=args.steps, sft_warmup=args.sft_warmup,
                         sft_steps=args.sft_steps, gemm_sizes=args.gemm_sizes, copy_megabytes=args.copy_mb,
                         repeats=args.repeats)
    result["date"] = datetime.now(timezone.utc).date().isoformat()
    checkout = git_revision()
    result["revision"] = checkout["revision"][:7] + (" with uncommitted edits" if checkout["dirty"] else "")
    result["command"] = shlex.join(["python", "-m", "benchmarks.profile_trainer",
                                    *(sys.argv[1:] if argv is None else argv)])
    text = render(result)
    print(text)
    print(f"measured in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.out:
        from dara.io import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
