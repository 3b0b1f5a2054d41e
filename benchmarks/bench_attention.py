"""One layer's attention of the tiny policy: Hugging Face's SDPA path against OpenBLAS's products (`dara.tiny.gemm`).

Run under the kernel pin, as every benchmark:
``pin=$(.venv/bin/python -m dara.kernels env) && env $pin .venv/bin/python -m benchmarks.bench_attention
--out docs/results/bench_attention.md`` (under a minute on one core).

What is compared, in one process on one thread: ``transformers``' own ``sdpa_attention_forward`` (what a policy
without ``dara_attention`` computes: the grouped keys and values repeated per query head, then torch's SDPA CPU
kernel with the boolean mask) and `dara.tiny.gemm.openblas_attention` (what a policy with ``dara_attention:
openblas`` computes), on the same random inputs, at the shapes of the tiny trainer's calls: an update minibatch's
response forward over its prompts' cache, and a warm-start batch. Each case is timed forward alone (no autograd, as
the reference forward and the evaluation) and forward with backward (as the update and the warm start), the two
sides alternating within each repetition; a repetition's time is the best of ``--inner`` calls, the ratio is the
median over repetitions of SDPA's time over OpenBLAS's. The outputs are compared too (the largest absolute
difference over the queries that see a key), since a faster wrong attention would be no lever.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch

from dara.io import write_text_atomic
from dara.kernels import cpu, dispatch
from dara.tiny.gemm import openblas_attention


@dataclass(frozen=True)
class Case:
    name: str
    rows: int
    queries: int
    keys: int
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16


# The tiny policy's heads (4 query, 2 key/value, 16 wide) at its trainer's shapes: an update minibatch (48 responses,
# 48 response positions over 40 prompt positions of cache) and a warm-start batch (32 demonstrations of 75 tokens).
CASES = (Case("update minibatch (responses over the prompt cache)", rows=48, queries=48, keys=88),
         Case("warm-start batch", rows=32, queries=75, keys=75))


def inputs(case: Case, grad: bool, seed: int = 0):
    """Query, key, value and a bool mask (left padding of up to 7 positions, causal among the last ``queries``)."""
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(case.rows, case.heads, case.queries, case.head_dim, generator=generator, requires_grad=grad)
    key, value = (torch.randn(case.rows, case.kv_heads, case.keys, case.head_dim, generator=generator,
                              requires_grad=grad) for _ in range(2))
    allowed = torch.ones(case.keys, case.keys, dtype=torch.bool).tril()[-case.queries:]
    allowed = allowed[None, None].repeat(case.rows, 1, 1, 1)
    for row in range(case.rows):
        allowed[row, :, :, :row % 8] = False
    return query, key, value, allowed


def sdpa(query, key, value, allowed, scaling):
    """Hugging Face's SDPA attention as a Qwen2 layer calls it, output (B, Lq, H, D)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    module = SimpleNamespace(num_key_value_groups=query.shape[1] // key.shape[1], is_causal=True)
    return sdpa_attention_forward(module, query, key, value, allowed, scaling=scaling)[0]


def blas(query, key, value, allowed, scaling):
    return openblas_attention(query, key, value, allowed, scaling)


def _best(call, inner: int) -> float:
    best = float("inf")
    for _ in range(inner):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def measure(case: Case, repeats: int, inner: int) -> dict:
    """Per pass (forward; forward and backward): each side's median best time (ms), the median ratio, and the
    largest output difference between the sides."""
    scaling = case.head_dim ** -0.5
    result = {"case": case}
    for grad in (False, True):
        query, key, value, allowed = inputs(case, grad)
        weights = torch.randn(case.rows, case.queries, case.heads, case.head_dim, generator=torch.Generator()
                              .manual_seed(1))

        def call(attention):
            def run():
                if grad:
                    (attention(query, key, value, allowed, scaling) * weights).sum().backward()
                else:
                    with torch.no_grad():
                        attention(query, key, value, allowed, scaling)
            return run

        times = {"sdpa": [], "openblas": []}
        for _ in range(repeats):
            for side, attention in (("sdpa", sdpa), ("openblas", blas)):
                times[side].append(_best(call(attention), inner))
        with torch.no_grad():
            # queries that see a key: a padding query that sees none is read by nothing (SDPA gives it 0, the
            # OpenBLAS attention a finite mean, dara.tiny.gemm)
            seen = allowed.any(-1)[:, 0]  # (rows, queries)
            difference = (sdpa(query, key, value, allowed, scaling)
                          - blas(query, key, value, allowed, scaling))[seen].abs().max().item()
        result["backward" if grad else "forward"] = {
            "sdpa_ms": statistics.median(times["sdpa"]) * 1e3,
            "openblas_ms": statistics.median(times["openblas"]) * 1e3,
            "ratio": statistics.median(a / b for a, b in zip(times["sdpa"], times["openblas"])),
            "difference": difference}
    return result


def machine_text() -> str:
    """The CPU and the kernel dispatch this process computes under, as a benchmark's page names them."""
    machine, pinned = cpu(), dispatch()
    variables = " ".join(f"{k}={v}" for k, v in pinned["variables"].items() if v is not None) or "unpinned"
    return (f"CPU {machine['model_name']}; kernel dispatch {variables} (ATen {pinned.get('aten_cpu_capability')}, "
            f"OpenBLAS {pinned.get('openblas_core')} kernels, torch {pinned.get('torch')})")


def render(results: list[dict], repeats: int, inner: int, command: str) -> str:
    lines = [f"# One layer's attention: SDPA against OpenBLAS's products ({time.strftime('%Y-%m-%d')})", "",
             f"Written by `{command}` (`benchmarks/bench_attention.py`, whose docstring says what is compared). One "
             f"process, one thread; {repeats} interleaved repetitions, each the best of {inner} calls; "
             f"{machine_text()}.", "",
             "| case | rows x heads (kv) x queries x keys | pass | SDPA (ms) | OpenBLAS (ms) | SDPA / OpenBLAS | "
             "largest output difference |", "|---|---|---|---|---|---|---|"]
    for result in results:
        case = result["case"]
        shape = f"{case.rows} x {case.heads} ({case.kv_heads}) x {case.queries} x {case.keys}"
        for name, label in (("forward", "forward"), ("backward", "forward and backward")):
            row = result[name]
            lines.append(f"| {case.name} | {shape} | {label} | {row['sdpa_ms']:.2f} | {row['openblas_ms']:.2f} | "
                         f"**{row['ratio']:.2f}x** | {row['difference']:.1e} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--inner", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = parser.parse_args(argv)
    if min(args.repeats, args.inner) < 1:
        parser.error("--repeats and --inner must be at least 1")
    torch.set_num_threads(1)
    results = [measure(case, args.repeats, args.inner) for case in CASES]
    command = "python -m benchmarks.bench_attention" + (f" --out {args.out}" if args.out else "")
    page = render(results, args.repeats, args.inner, command)
    print(page)
    if args.out:
        write_text_atomic(args.out, page)


if __name__ == "__main__":
    main()
