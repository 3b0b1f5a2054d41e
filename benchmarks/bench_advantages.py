"""Time every estimator at paper size against a per-group Python loop (and verl's own estimators when installed).

Run: ``make bench`` or ``.venv/bin/python -m benchmarks.bench_advantages [--prompts 512 --group-size 16 --channels 3]``.
Prints the fastest of several calls (robust to a busy machine) and ratios measured in the same process, on the same batch:
  * loop/ours: the float64 loop reference (:mod:`dara.advantages_loop`) against the vectorised estimator;
  * verl/ours: verl's ``grpo_vectorized`` (one summed reward) and ``gdpo`` against ours, both including the broadcast
    over response tokens that verl's estimators return.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from dara.advantages import compute_advantages
from dara.advantages_loop import loop_advantages
from dara.methods import METHODS, get_method

from benchmarks import history


def best_seconds(fn, repeats: int) -> float:
    """Fastest of ``repeats`` calls after a warm-up: other load on the machine only ever adds time."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def make_batch(prompts: int, group_size: int, channels: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = prompts * group_size
    rewards = (rng.random((n, channels)) < rng.uniform(0.02, 0.6, size=channels)).astype(np.float32)
    uids = np.array([f"uid-{p:05d}" for p in np.repeat(np.arange(prompts), group_size)], dtype=object)
    return rewards, uids


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--group-size", type=int, default=16)
    parser.add_argument("--channels", type=int, default=3)
    parser.add_argument("--response-length", type=int, default=1024, help="tokens per response for the verl comparison")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the results as Markdown here (make bench: "
                                                    "docs/results/bench_advantages.md, a README block)")
    history.add_arguments(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = (f"{args.prompts} prompts x {args.group_size} responses, K = {args.channels} rewards, {args.threads} "
                f"torch thread(s), fastest of {args.repeats} calls (3 for the loop)")
    history_file = history.history_path(args.out, args.history, args.no_history)
    recorded = history.start_run("bench_advantages", settings, sys.argv[1:] if argv is None else argv) \
        if history_file else None

    rewards, uids = make_batch(args.prompts, args.group_size, args.channels)
    shuffle = np.random.default_rng(1).permutation(len(uids))
    layouts = {"contiguous": (rewards, uids), "shuffled": (rewards[shuffle], uids[shuffle])}
    static = {"static_weights": [1.0] * (args.channels - 1) + [5.0]}
    print(f"batch: {args.prompts} prompts x {args.group_size} responses, K={args.channels}, torch threads={args.threads}")
    print(f"{'method':<12} {'layout':<11} {'ours ms':>9} {'loop ms':>9} {'loop/ours':>10}")
    lines = [f"{settings}:", "",
             "| method | uids | ours (ms) | loop (ms) | loop/ours |", "|---|---|---|---|---|"]
    estimators = []
    for method in METHODS:
        kwargs = static if get_method(method).needs_static_weights else {}
        for layout, (r, index) in layouts.items():
            r_tensor = torch.from_numpy(r)
            ours = best_seconds(lambda: compute_advantages(method, r_tensor, index, **kwargs), args.repeats)
            loop = best_seconds(lambda: loop_advantages(method, r, index, **kwargs), 3)
            print(f"{method:<12} {layout:<11} {ours * 1e3:9.2f} {loop * 1e3:9.1f} {loop / ours:9.0f}x")
            lines.append(f"| {method} | {layout} | {ours * 1e3:.2f} | {loop * 1e3:.1f} | {loop / ours:.0f}x |")
            estimators.append({"method": method, "uids": layout, "ours_ms": ours * 1e3, "loop_ms": loop * 1e3,
                               "ratio": loop / ours})
    verl_lines, verl = compare_with_verl(rewards, uids, args)
    lines += verl_lines
    rows = history.run_rows(recorded, history.advantages_measurements(estimators, verl)) if recorded else None
    if args.out:
        from dara.io import write_text_atomic

        write_text_atomic(args.out, "\n".join(lines) + "\n")
    history.record(history_file, rows)


def compare_with_verl(rewards: np.ndarray, uids: np.ndarray, args) -> tuple[list[str], dict | None]:
    """Time verl's own estimators against ours; returns the Markdown lines of the comparison and its numbers for the
    history (`benchmarks.history.advantages_measurements`; None without verl)."""
    try:
        import verl
        from verl.trainer.ppo import core_algos
    except ImportError as error:
        print(f"verl not importable ({error}); skipping the comparison with verl's estimators")
        return ["", f"verl not importable ({error}): no comparison with verl's estimators."], None
    n, length = len(uids), args.response_length
    lengths = torch.randint(length // 4, length + 1, (n,), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    last = lengths - 1

    def token_level(column: np.ndarray) -> torch.Tensor:
        out = torch.zeros(n, length)
        out[torch.arange(n), last] = torch.from_numpy(column.astype(np.float32))
        return out

    summed = token_level(rewards.sum(axis=1))
    r_tensor = torch.from_numpy(rewards)

    def ours_grpo():
        return compute_advantages("grpo", r_tensor[:, :1], uids).advantages[:, None] * mask

    def verl_grpo():
        return core_algos.compute_grpo_vectorized_outcome_advantage(token_level(rewards[:, 0]), mask, uids)

    keys = [f"r{k}" for k in range(rewards.shape[1])]
    prompt_len = 8
    batch = {"prompts": torch.zeros(n, prompt_len, dtype=torch.long),
             "attention_mask": torch.cat([torch.ones(n, prompt_len), mask], dim=1).long()}
    non_tensor = {key: rewards[:, k] for k, key in enumerate(keys)}
    config = {"gdpo_reward_keys": keys}

    def ours_gdpo():
        return compute_advantages("gdpo", r_tensor, uids, lengths=lengths, batch_norm="token").advantages[:, None] * mask

    def verl_gdpo():
        return core_algos.compute_gdpo_outcome_advantage(summed, mask, uids, config=config,
                                                         non_tensor_batch=non_tensor, batch=batch)

    mine, theirs = ours_gdpo(), verl_gdpo()[0]
    agree = torch.allclose(mine, theirs, atol=1e-4)
    print(f"\nverl comparison ({length}-token responses; our outputs include the token broadcast)")
    lines = ["", f"Against verl 0.9.1's own estimators on the same batch with {length}-token responses (ours include the "
                 "broadcast over tokens that verl's return):", "",
             "| verl estimator | ours (ms) | verl (ms) | verl/ours |", "|---|---|---|---|"]
    found = {"version": verl.__version__, "response_length": length, "estimators": [], "agrees": bool(agree)}
    for name, ours_fn, verl_fn in (("grpo_vectorized (K=1)", ours_grpo, verl_grpo), ("gdpo", ours_gdpo, verl_gdpo)):
        ours = best_seconds(ours_fn, args.repeats)
        theirs_s = best_seconds(verl_fn, 3 if name == "gdpo" else args.repeats)
        print(f"{name:<22} ours {ours * 1e3:8.2f} ms  verl {theirs_s * 1e3:8.2f} ms  verl/ours {theirs_s / ours:6.1f}x")
        lines.append(f"| `{name}` | {ours * 1e3:.2f} | {theirs_s * 1e3:.2f} | {theirs_s / ours:.1f}x |")
        found["estimators"].append({"name": name, "ours_ms": ours * 1e3, "verl_ms": theirs_s * 1e3,
                                    "ratio": theirs_s / ours})
    print(f"gdpo outputs agree with verl's (atol 1e-4): {agree}")
    lines += ["", f"Our GDPO output equals verl's `gdpo` to 1e-4: {'yes' if agree else 'NO'}."]
    return lines, found


if __name__ == "__main__":
    main()
