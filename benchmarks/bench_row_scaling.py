"""How the tiny trainer's costs grow with the rows of one call: the ceiling of training several runs together.

Run under the kernel pin, as every benchmark:
``pin=$(.venv/bin/python -m dara.kernels env) && env $pin .venv/bin/python -m benchmarks.bench_row_scaling
--repeats 5 --out docs/results/bench_row_scaling.md`` (about a minute on one core; it reads
``results/tiny/policies/toolcall/warm_start0`` after ``make reproduce``, or makes that warm start first).

Why: a job trains its seeds one after another, each step a few hundred small calls. Stacking several runs' steps
into one call each (issue "the tiny trainer at the speed of its arithmetic": "several runs batched in one process")
pays only where a call's fixed cost (Python, dispatch, small-kernel start-up) dominates its work. This measures that
share before anything is built: one policy's two row-bound phases of an RL step, at 1, 2, 5 and 10 times the step's
rows in one call, the same policy and settings, so that k times the rows is k runs' worth of work in the best case
for batching (one set of weights; runs stacked together would add their own products per run):

- **sampling** (`dara.tiny.policy.rollout`): the run's prompts per step times the multiple, distinct prompts from the
  task's training split, each repeated for its group, as k runs would draw them;
- **the update's forward and backward** (`dara.tiny.policy.token_logprobs` with a gradient, then the backward of the
  log-probs' sum): over the 1x rollout's batch repeated k times, so that each multiple computes exactly k times the
  work of 1x (its prompt groups computed once each, as the trainer does).

Each repetition times every multiple once, in order (interleaved, so a change in the machine's speed touches them
all); a time is the process's CPU time. The **gain** of a multiple is the 1x time of the step's rows over their time
at k times the rows (the call's time over k), the median over repetitions of that ratio within a repetition: 1.00 when
a call's cost is all proportional to its rows (nothing to share), k when it is all fixed cost. The decoding steps of
a rollout are shown beside it: more rows wait for a longer longest response.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import torch

from benchmarks.bench_attention import machine_text
from benchmarks.profile_trainer import add_run_arguments, ensure_policy
from dara.io import write_text_atomic
from dara.tiny.policy import load_policy, rollout, token_logprobs

ROOT = Path(__file__).resolve().parents[1]
MULTIPLES = (1, 2, 5, 10)


def checked_multiples(multiples: Sequence[int]) -> tuple[int, ...]:
    """``multiples`` sorted, if they hold 1 (the baseline every gain is against) and no value below 1 or repeated."""
    if 1 not in multiples or min(multiples) < 1 or len(set(multiples)) != len(multiples):
        raise ValueError("multiples must be distinct integers >= 1 and include 1 (the baseline); "
                         f"got {list(multiples)}")
    return tuple(sorted(multiples))


def step_prompts(task, prompts_per_step: int, group_size: int, multiple: int) -> list[str]:
    """``multiple`` steps' worth of distinct training prompts, each repeated ``group_size`` times (in groups)."""
    items = task.items("train", prompts_per_step * multiple, seed=0)
    return [item["prompt"] for item in items for _ in range(group_size)]


def repeated_batch(batch: dict[str, torch.Tensor], multiple: int) -> dict[str, torch.Tensor]:
    """A rollout's batch with its rows repeated ``multiple`` times, one copy after the other (whole prompt groups)."""
    return {name: tensor if tensor.dim() == 0 else tensor.repeat(multiple, *[1] * (tensor.dim() - 1))
            for name, tensor in batch.items()}


def update_pass(model, batch: dict[str, torch.Tensor], group_size: int) -> None:
    """The update's forward and backward over ``batch`` (its response tokens scored, prompts computed once per
    group), its gradients then dropped."""
    log_probs, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=int(batch["prompt_length"]),
                                  prompt_group_size=group_size, scored=batch["response_mask"].bool())
    log_probs.sum().backward()
    model.zero_grad(set_to_none=True)


def measure(model, tokenizer, task, *, prompts_per_step: int, group_size: int, max_new_tokens: int,
            temperature: float, multiples: Sequence[int], repeats: int) -> dict[int, dict[str, Any]]:
    """Per multiple: the rows of a call, the median times (s) of sampling and of the update's pass, their gains
    against 1x (medians of within-repetition ratios) and the rollouts' decoding steps."""
    multiples = checked_multiples(multiples)
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1; got {repeats}")
    prompts = {k: step_prompts(task, prompts_per_step, group_size, k) for k in multiples}
    torch.manual_seed(0)
    base_batch = rollout(model, tokenizer, prompts[1], max_new_tokens=max_new_tokens, temperature=temperature)
    batches = {k: repeated_batch(base_batch, k) for k in multiples}
    times = {k: {"sampling": [], "update": [], "decoding_steps": []} for k in multiples}
    for repetition in range(repeats):
        for k in multiples:
            torch.manual_seed(repetition)
            model.eval()
            started = time.process_time()
            sampled = rollout(model, tokenizer, prompts[k], max_new_tokens=max_new_tokens, temperature=temperature)
            times[k]["sampling"].append(time.process_time() - started)
            times[k]["decoding_steps"].append(sampled["response_mask"].shape[1])
            model.train()
            started = time.process_time()
            update_pass(model, batches[k], group_size)
            times[k]["update"].append(time.process_time() - started)
    result = {}
    for k in multiples:
        row: dict[str, Any] = {"rows": len(prompts[k]), "update_rows": int(batches[k]["input_ids"].shape[0]),
                               "decoding_steps": statistics.median(times[k]["decoding_steps"])}
        for phase in ("sampling", "update"):
            row[f"{phase}_s"] = statistics.median(times[k][phase])
            row[f"{phase}_gain"] = statistics.median(one * k / many for one, many
                                                     in zip(times[1][phase], times[k][phase]))
        result[k] = row
    return result


def render(result: dict[int, dict[str, Any]], *, repeats: int, command: str, policy: str, setting: str) -> str:
    lines = [f"# The tiny trainer's costs against the rows of one call ({time.strftime('%Y-%m-%d')})", "",
             f"Written by `{command}` (`benchmarks/bench_row_scaling.py`, whose docstring says what is measured). "
             f"Policy `{policy}`; {setting}. One process, one thread; {repeats} interleaved repetitions, medians of "
             f"CPU time; {machine_text()}.", "",
             "Gain: the step's rows at 1x over their time at k times the rows in one call (1.00: every cost grows "
             "with the rows; k: all of it is a call's fixed cost), the median over repetitions of that ratio within "
             "each; it can differ from the ratio of the columns' medians.", "",
             "| rows per call (x the step's) | sampling (ms) | sampling, per step's rows (ms) | sampling gain | "
             "decoding steps | update forward and backward (ms) | per step's rows (ms) | update gain |",
             "|---|---|---|---|---|---|---|---|"]
    for k, row in result.items():
        lines.append(f"| {row['rows']} ({k}x) | {row['sampling_s'] * 1e3:.0f} | {row['sampling_s'] * 1e3 / k:.0f} | "
                     f"**{row['sampling_gain']:.2f}x** | {row['decoding_steps']:.0f} | {row['update_s'] * 1e3:.0f} | "
                     f"{row['update_s'] * 1e3 / k:.0f} | **{row['update_gain']:.2f}x** |")
    largest = max(result)
    lines += ["", f"At {largest}x the rows in one call, the step's rows cost 1/{result[largest]['sampling_gain']:.2f} "
                  f"of their 1x time in sampling and 1/{result[largest]['update_gain']:.2f} in the update's forward "
                  "and backward: the most that stacking that many runs' calls could save in each phase, before the "
                  "products each run would still compute with its own weights."]
    return "\n".join(lines) + "\n"


def load_measured_run(args: argparse.Namespace, scratch: Path):
    """The run `add_run_arguments` names: the run, its `TrainSettings`, its warm start's tokenizer and model (made into
    ``scratch`` when missing, `ensure_policy`) and its task."""
    from dara.experiments import load_experiment
    from dara.runs import find_run
    from dara.tasks import get_task
    from dara.tiny.trainer import TrainSettings

    run = find_run(load_experiment(args.experiment), args.task, args.method, args.group_size, args.seed)
    settings = TrainSettings.of(run)
    policy = ensure_policy(args.policy or ROOT / run.policy_dir, args.experiment, args.task, run.warm_start, scratch)
    tokenizer, model = load_policy(policy)
    return run, settings, tokenizer, model, get_task(args.task, **settings.task_options)


def setting_text(run, settings, group_size: int) -> str:
    """The measured run's step, for a page's first paragraph."""
    return (f"{run.name}'s settings: {settings.responses_per_step} responses a step in groups of {group_size}, "
            f"at most {settings.max_new_tokens} new tokens")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--multiples", type=int, nargs="+", default=list(MULTIPLES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown here")
    args = parser.parse_args(argv)
    try:
        checked_multiples(args.multiples)
    except ValueError as error:
        parser.error(str(error))
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        run, settings, tokenizer, model, task = load_measured_run(args, Path(scratch))
        result = measure(model, tokenizer, task, prompts_per_step=settings.responses_per_step // args.group_size,
                         group_size=args.group_size, max_new_tokens=settings.max_new_tokens,
                         temperature=settings.temperature, multiples=args.multiples, repeats=args.repeats)
    command = shlex.join(["python", "-m", "benchmarks.bench_row_scaling", *(sys.argv[1:] if argv is None else argv)])
    shown = args.policy or run.policy_dir
    setting = setting_text(run, settings, args.group_size)
    page = render(result, repeats=args.repeats, command=command, policy=str(shown), setting=setting)
    print(page)
    if args.out:
        write_text_atomic(args.out, page)


if __name__ == "__main__":
    main()
