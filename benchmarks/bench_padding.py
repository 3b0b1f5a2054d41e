"""What the positions after a response's EOS cost the trainer's forward passes: the ceiling of a packed layout.

Run under the kernel pin, as every benchmark:
``pin=$(.venv/bin/python -m dara.kernels env) && env $pin .venv/bin/python -m benchmarks.bench_padding
--repeats 9 --also results/tiny/runs/toolcall/dara_sym/G8/seed0/checkpoints/step{15,30}
--out docs/results/bench_padding.md`` (about a minute on one core; it reads
``results/tiny/policies/toolcall/warm_start0`` after ``make reproduce``, or makes that warm start first, and each
``--also`` checkpoint: a run's later policies, whose responses are as long as training has made them).

Why: the reference forward and the update run the policy's layers on every response position up to the batch's
longest response, also after a shorter response's EOS, where nothing is scored (the LM head already runs only on the
scored tokens, `dara.tiny.policy.token_logprobs`). A packed layout (each response only as long as it is, attention
kept within its own row) would drop those positions, at the cost of a variable-length attention. This measures the
most that could save before anything is built (issue "the tiny trainer at the speed of its arithmetic"): one RL
step's batch, sampled from the policy as the trainer samples it, timed in three layouts:

- **padded**: the batch as the trainer computes it, every row as wide as the longest response, scored up to its EOS;
- **as if packed**: the same rows, each cut to the batch's mean response length and every kept position scored, so
  that the layers compute as many response positions as the batch has real tokens and the LM head scores as many
  tokens (the rows' prompt groups computed once each in both). Its tokens are not the responses' (a cut row loses
  its end, a short one keeps padding): only the amount of work matches, which is what a time measures.

- **width buckets** (``--buckets``, default 2): a layout that needs no variable-length attention, measured as a
  candidate: the same padded batch, each prompt computed once, then the rows sorted by response length into that
  many buckets, each bucket's responses computed at its own longest response's width over its rows' prompt keys and
  values (`bucketed_logprobs`; the same log-probs as `token_logprobs` to float rounding, tested). More buckets drop
  more positions, but each costs a call.

Both the reference forward (`token_logprobs` under ``inference_mode``) and the update's forward and backward are
timed (the process's CPU time), the layouts interleaved in each repetition. The **gain** of a layout in a phase is
the padded time over its time, the median over repetitions of that ratio within a repetition; as if packed, it is an
upper bound on what packing could buy there, since it leaves out the variable-length attention's own cost.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from benchmarks.bench_attention import machine_text
from benchmarks.bench_row_scaling import load_measured_run, setting_text, step_prompts, update_pass
from benchmarks.profile_trainer import add_run_arguments
from dara.io import write_text_atomic
from dara.tiny.policy import load_policy, rollout, shared_prompt_prefill, token_logprobs

LAYOUTS = ("padded", "as if packed", "width buckets")
BUCKETS = 2
PHASES = ("reference forward", "update forward and backward")


def as_if_packed(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``batch`` with every row cut to its rows' mean response length (rounded, at least 1) and every kept response
    position real and scored: the work of a packed layout of the same responses (see the module docstring)."""
    prompt = int(batch["prompt_length"])
    real = int(batch["response_mask"].sum())
    rows = batch["input_ids"].shape[0]
    width = max(1, round(real / rows))  # at most the response width: no row holds more real tokens than that
    attention = batch["attention_mask"][:, :prompt + width].clone()
    attention[:, prompt:] = 1
    return {"input_ids": batch["input_ids"][:, :prompt + width], "attention_mask": attention,
            "prompt_length": batch["prompt_length"],
            "response_mask": torch.ones(rows, width, dtype=batch["response_mask"].dtype)}


def response_positions(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """The response positions the layers compute (rows x response width) and those that hold a real token."""
    rows, width = batch["response_mask"].shape
    return rows * width, int(batch["response_mask"].sum())


def bucketed_logprobs(model, batch: dict[str, torch.Tensor], group_size: int, buckets: int) -> torch.Tensor:
    """`token_logprobs` of ``batch``'s response tokens (B, response width; 0 where unscored), each prompt group's
    prompt computed once, then the rows in ``buckets`` buckets by response length, each computed at its own width.

    A candidate layout, here to be timed: the prompt's keys and values are gathered for each bucket's rows (a bucket
    mixes groups), and a bucket's rows stop at its longest scored response, so no row computes positions after the
    bucket's longest EOS."""
    ids, attention, scored = batch["input_ids"], batch["attention_mask"], batch["response_mask"].bool()
    start = int(batch["prompt_length"])
    positions = (attention.long().cumsum(-1) - 1).clamp(min=0)
    first, prefill = shared_prompt_prefill(model, ids, attention, positions, start, group_size)
    prompt_cache = [(layer.keys, layer.values) for layer in prefill.layers]
    lengths = scored.sum(dim=1)
    logp = torch.zeros(scored.shape)
    for rows in torch.argsort(lengths, stable=True).chunk(buckets):
        width = max(1, int(lengths[rows].max()))
        groups = rows // group_size
        hidden = [first[groups]]
        if width > 1:
            cache = DynamicCache(config=model.config)
            for index, (keys, values) in enumerate(prompt_cache):
                cache.update(keys[groups], values[groups], index)
            hidden.append(model.model(input_ids=ids[rows, start:start + width - 1],
                                      attention_mask=attention[rows, :start + width - 1],
                                      position_ids=positions[rows, start:start + width - 1], past_key_values=cache,
                                      use_cache=True).last_hidden_state)
        kept = scored[rows, :width]
        log_probs = torch.log_softmax(model.lm_head(torch.cat(hidden, dim=1)[kept]).float(), dim=-1)
        log_probs = log_probs.gather(-1, ids[rows, start:start + width][kept][:, None]).squeeze(-1)
        block = log_probs.new_zeros(len(rows), scored.shape[1])
        block[:, :width] = block[:, :width].masked_scatter(kept, log_probs)
        logp = logp.index_put((rows,), block)
    return logp


def reference_pass(model, batch: dict[str, torch.Tensor], group_size: int, buckets: int = 0) -> None:
    """The reference forward over ``batch``, as the trainer runs it (no graph, prompts computed once per group); with
    ``buckets``, in that many width buckets."""
    with torch.inference_mode():
        if buckets:
            bucketed_logprobs(model, batch, group_size, buckets)
        else:
            token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=int(batch["prompt_length"]),
                           prompt_group_size=group_size, scored=batch["response_mask"].bool())


def bucketed_update_pass(model, batch: dict[str, torch.Tensor], group_size: int, buckets: int) -> None:
    """`update_pass` in width buckets."""
    bucketed_logprobs(model, batch, group_size, buckets).sum().backward()
    model.zero_grad(set_to_none=True)


def measure(model, tokenizer, task, *, prompts_per_step: int, group_size: int, max_new_tokens: int,
            temperature: float, repeats: int, buckets: int = BUCKETS) -> dict[str, Any]:
    """One step's batch in every layout: its positions, and per phase and layout the median times (s) and the gain
    against the padded layout."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")
    if buckets < 2:
        raise ValueError(f"width buckets need at least 2 buckets (1 is the padded layout); got {buckets}")
    torch.manual_seed(0)
    model.eval()
    padded = rollout(model, tokenizer, step_prompts(task, prompts_per_step, group_size, 1),
                     max_new_tokens=max_new_tokens, temperature=temperature)
    packed = as_if_packed(padded)
    passes = {("padded", PHASES[0]): lambda: reference_pass(model, padded, group_size),
              ("padded", PHASES[1]): lambda: update_pass(model, padded, group_size),
              ("as if packed", PHASES[0]): lambda: reference_pass(model, packed, group_size),
              ("as if packed", PHASES[1]): lambda: update_pass(model, packed, group_size),
              ("width buckets", PHASES[0]): lambda: reference_pass(model, padded, group_size, buckets),
              ("width buckets", PHASES[1]): lambda: bucketed_update_pass(model, padded, group_size, buckets)}
    times: dict[tuple[str, str], list[float]] = {key: [] for key in passes}
    for _ in range(repeats):
        for layout in LAYOUTS:
            for phase in PHASES:
                model.train(phase != "reference forward")
                started = time.process_time()
                passes[layout, phase]()
                times[layout, phase].append(time.process_time() - started)
    model.eval()
    computed, real = response_positions(padded)
    result: dict[str, Any] = {"rows": padded["input_ids"].shape[0], "prompt_length": int(padded["prompt_length"]),
                              "response_width": padded["response_mask"].shape[1],
                              "packed_width": packed["response_mask"].shape[1], "buckets": buckets,
                              "computed_positions": computed, "real_positions": real}
    for phase in PHASES:
        result[phase] = {"padded_s": statistics.median(times["padded", phase])}
        for layout, key in (("as if packed", "packed"), ("width buckets", "buckets")):
            ratios = [full / other for full, other in zip(times["padded", phase], times[layout, phase])]
            result[phase].update({f"{key}_s": statistics.median(times[layout, phase]),
                                  f"{key}_gain": statistics.median(ratios), f"{key}_gain_low": min(ratios),
                                  f"{key}_gain_high": max(ratios)})
    return result


def render(results: list[tuple[str, dict[str, Any]]], *, repeats: int, command: str, setting: str) -> str:
    """The page: one row per policy (its step's batch) and phase."""
    buckets = {result["buckets"] for _, result in results}
    lines = [f"# What the positions after EOS cost the trainer's forward passes ({time.strftime('%Y-%m-%d')})", "",
             f"Written by `{command}` (`benchmarks/bench_padding.py`, whose docstring says what is measured); "
             f"{setting}. One process, one thread; {repeats} interleaved repetitions, medians of CPU time; "
             f"{machine_text()}.", "",
             "Each policy's batch is one step's responses sampled from it: the positions the layers compute for them "
             "padded (rows x the longest response) and those holding a token up to its EOS; as if packed, every row "
             "is as wide as the mean response, and the prompts (each prompt group's computed once) are the same in "
             f"both; in width buckets, the padded batch's rows in {' or '.join(map(str, sorted(buckets)))} buckets by "
             "response length, each at its own width. Gain: the padded time over the layout's, the median over "
             "repetitions of that ratio within each (it can differ from the ratio of the columns' medians), with the "
             "repetitions' range; as if packed, an upper bound on what a packed layout could save in that phase, "
             "before its variable-length attention's own cost.", "",
             "| policy | response positions: computed, real | phase | padded (ms) | as if packed (ms) | gain "
             "(repetitions) | width buckets (ms) | gain (repetitions) |", "|---|---|---|---|---|---|---|---|"]
    for policy, result in results:
        computed, real = result["computed_positions"], result["real_positions"]
        positions = (f"{computed:,} ({result['rows']} x {result['response_width']}), {real:,} "
                     f"({100 * real / computed:.0f} %)")
        for phase in PHASES:
            row = result[phase]
            cells = [f"{row[f'{key}_s'] * 1e3:.0f} | **{row[f'{key}_gain']:.2f}x** "
                     f"({row[f'{key}_gain_low']:.2f}-{row[f'{key}_gain_high']:.2f}x)" for key in ("packed", "buckets")]
            lines.append(f"| `{policy}` | {positions} | {phase} | {row['padded_s'] * 1e3:.0f} | " + " | ".join(cells)
                         + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--also", type=Path, nargs="*", default=[], metavar="CHECKPOINT",
                        help="later policies of a run (Hugging Face checkpoint folders), each measured the same way")
    parser.add_argument("--buckets", type=int, default=BUCKETS, help="width buckets of the candidate layout (>= 2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.buckets < 2:
        parser.error("--buckets must be at least 2 (1 is the padded layout)")
    missing = [str(path) for path in args.also if not (path / "config.json").is_file()]
    if missing:
        parser.error(f"--also names no checkpoint folder (config.json) at {', '.join(missing)}")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        run, settings, tokenizer, model, task = load_measured_run(args, Path(scratch))
        policies = [(str(args.policy or run.policy_dir), (tokenizer, model)),
                    *[(str(path), load_policy(path)) for path in args.also]]
        prompts_per_step = settings.responses_per_step // args.group_size
        results = [(name, measure(model, tokenizer, task, prompts_per_step=prompts_per_step, group_size=args.group_size,
                                  max_new_tokens=settings.max_new_tokens, temperature=settings.temperature,
                                  repeats=args.repeats, buckets=args.buckets))
                   for name, (tokenizer, model) in policies]
    command = shlex.join(["python", "-m", "benchmarks.bench_padding", *(sys.argv[1:] if argv is None else argv)])
    page = render(results, repeats=args.repeats, command=command, setting=setting_text(run, settings, args.group_size))
    print(page)
    if args.out:
        write_text_atomic(args.out, page)


if __name__ == "__main__":
    main()
