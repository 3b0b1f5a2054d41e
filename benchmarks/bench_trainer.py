"""Time the tiny trainer's step and a warm-start (supervised) step against an older revision's (default 028b1f6).

Run: ``make bench-trainer`` or ``python -m benchmarks.bench_trainer [--policy results/tiny/policies/toolcall/warm_start0]``.

The old trainer is never kept in the repository: ``git archive <revision> src`` extracts it into a temporary folder
and a subprocess imports ``dara`` from there; the new one runs in a subprocess importing this checkout's ``src``.
Both train the same policy, task, method, settings (the tiny experiment's, for fewer steps) and seed, one thread
each, alternating old, new, old, new, ... so that load on the machine hits both sides alike. A step's time is the
trainer's own ``seconds`` column (rollouts, rewards, advantages, log-probs, update; imports and checkpoints left
out). The two sides sample different responses (the sampler changed, so the random stream did), hence the mean
response length of each side is printed too: a step's cost grows with it.

Settings the old trainer does not know, and task options its task does not take, are left out and named in the
output (at the default old revision: the learning-rate warm-up, and ``wrong_key_rate``, which only shapes the
warm start's demonstrations, so both sides train on the same prompts).

Per phase, the time is split by wrapping the trainer module's functions: sampling (``sample`` / ``rollout``),
log-prob passes outside the update (``token_logprobs``: old log-probs and reference), the update (``ppo_update``,
its own forward and backward included), and the rest (decoding, rewards, advantages).

After the RL steps, the same process times ``--sft-steps`` supervised steps of the task's warm start (its batch size
and learning rate, its ``supervised_batch`` and ``sft_loss``: drawing and tokenizing the demonstrations, forward,
backward, clipping and AdamW), continuing from the same policy with the same batches on both sides.

``--matmul`` and ``--attention`` (default: the experiment's ``warm_start.matmul`` and ``warm_start.attention``, what
the pipeline runs) set the library of this checkout's linear layers and what computes its attention
(`dara.tiny.gemm`): the new side trains the policy, or a copy whose config names what is asked for where the policy's
names another (`policy_with_products`); the old side trains the policy as it is (torch's GEMM and SDPA: its dara has
no other). ``--matmul torch --attention sdpa`` measures the rest of the trainer alone.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import history

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("sampling", "logprobs", "update")
# each phase (and the rest) as the view's table and the history name it
PHASE_NAMES = {"sampling": "sampling", "logprobs": "log-probs outside the update", "update": "update", "other": "other"}


def worker(spec: dict) -> dict:
    """Train in this process and return per-step seconds, per-phase seconds and the mean response length."""
    import torch

    import dara
    import dara.tiny.trainer as trainer

    torch.set_num_threads(1)
    totals = {phase: 0.0 for phase in PHASES}
    active: list[str] = []

    def timed(phase, fn):
        # Only the outermost wrapped call counts: token_logprobs inside ppo_update is update time.
        def wrapper(*args, **kwargs):
            if active:
                return fn(*args, **kwargs)
            active.append(phase)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[phase] += time.perf_counter() - started
                active.pop()
        return wrapper

    sampler = "rollout" if hasattr(trainer, "rollout") else "sample"
    setattr(trainer, sampler, timed("sampling", getattr(trainer, sampler)))
    trainer.token_logprobs = timed("logprobs", trainer.token_logprobs)
    trainer.ppo_update = timed("update", trainer.ppo_update)

    # Settings a revision's trainer does not know (added later) are left out and reported, and so are task options
    # its task does not take. Revisions before dara.tiny.trainer.TrainSettings took one TrainArgs (coordinates,
    # folders and settings); later ones a Run.
    import dara.tasks

    spec, unknown_options = with_known_task_options(spec, getattr(dara.tasks, "TASK_CLASSES", None))
    with tempfile.TemporaryDirectory() as out:
        if hasattr(trainer, "TrainSettings"):
            from dara.runs import Run

            settings, unknown = taken_as_keywords(trainer.TrainSettings, spec["settings"])
            run = Run(scale="bench", backend="tiny", settings=settings, results=out, **spec["coordinates"])
            frame = trainer.train(run, policy=spec["policy"], progress=False)
        else:
            arguments, unknown = taken_as_keywords(trainer.TrainArgs, {**spec["coordinates"], **spec["settings"]})
            frame = trainer.train(trainer.TrainArgs(out=out, policy=spec["policy"], progress=False, **arguments))
    return {"dara": dara.__file__, "seconds": frame["seconds"].tolist(), "phases": totals,
            "response_length": float(frame["response_length"].mean()),
            "sft_seconds": supervised_seconds(spec) if spec.get("sft") else [],
            "ignored": unknown + [f"task_options.{name}" for name in unknown_options]}


def warm_start_optimizer(warmstart, parameters, learning_rate: float):
    """The optimiser a revision's warm start builds: its ``sft_optimizer`` where it has one; before that, AdamW as its
    ``warm_start`` built it, fused from 650b268 on (read from its source), unfused before."""
    import torch

    if hasattr(warmstart, "sft_optimizer"):
        return warmstart.sft_optimizer(parameters, learning_rate)
    fused = "fused=True" in inspect.getsource(warmstart.warm_start)
    return torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0, fused=fused)


def supervised_seconds(spec: dict) -> list[float]:
    """Seconds of each of ``spec["sft"]["steps"]`` supervised steps (after ``warmup`` untimed ones) of the task's
    warm start, from ``spec["policy"]``, with this process's ``dara`` (a revision's own batch and loss).

    The loop restates `dara.tiny.warmstart.warm_start`'s step (batch, loss, clipping, AdamW; no schedule) rather than
    calling it: the old revision measured here has no step function of its own, only ``supervised_batch`` and
    ``sft_loss``, which both sides call, and the optimiser, each side's own (``sft_optimizer`` where the revision
    has it)."""
    import numpy as np
    import torch

    from dara.tasks import get_task
    from dara.tiny.policy import load_policy
    from dara.tiny import warmstart
    from dara.tiny.warmstart import sft_loss, supervised_batch

    sft = spec["sft"]
    task = get_task(spec["coordinates"]["task"], **spec["settings"].get("task_options", {}))
    tokenizer, model = load_policy(spec["policy"])
    model.train()
    items = task.items("train", sft["corpus_items"], seed=0)
    prompts = [item["prompt"] for item in items]
    prompt_ids = dict(zip(prompts, tokenizer(prompts, add_special_tokens=False)["input_ids"]))
    optimizer = warm_start_optimizer(warmstart, model.parameters(), sft["learning_rate"])
    rng = np.random.default_rng([0, 1])
    torch.manual_seed(0)
    seconds = []
    for step in range(sft["warmup"] + sft["steps"]):
        started = time.perf_counter()
        chosen = rng.choice(len(items), size=sft["batch_size"], replace=False)
        ids, attention, loss_mask = supervised_batch(tokenizer, task, [items[i] for i in chosen], rng, prompt_ids)
        loss = sft_loss(model, ids, attention, loss_mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step >= sft["warmup"]:
            seconds.append(time.perf_counter() - started)
    return seconds


def policy_with_products(policy: Path, matmul: str, attention: str, folder: Path) -> Path:
    """``policy`` itself where its config already names ``matmul`` and ``attention`` (`dara.tiny.gemm`'s keys; absent:
    torch and sdpa); else a copy in ``folder`` whose config names them (a default without its key, as a warm start
    saves it), the same weights and tokenizer. The pipeline's warm starts may name OpenBLAS, so the defaults need a
    copy too."""
    from dara.tiny.gemm import ATTENTION_KEY, MATMUL_KEY, checked_attention, checked_matmul

    wanted = {MATMUL_KEY: (checked_matmul(matmul), "torch"), ATTENTION_KEY: (checked_attention(attention), "sdpa")}
    config = json.loads((policy / "config.json").read_text())
    if all(config.get(key, default) == value for key, (value, default) in wanted.items()):
        return policy
    copy = folder / f"policy-{matmul}-{attention}"
    shutil.copytree(policy, copy)
    config = {key: value for key, value in config.items() if key not in wanted}
    config.update({key: value for key, (value, default) in wanted.items() if value != default})
    (copy / "config.json").write_text(json.dumps(config, indent=2))
    return copy


def taken_as_keywords(target, values: dict) -> tuple[dict, list[str]]:
    """The entries of ``values`` that ``target`` (a class or function: a trainer's settings dataclass, a task)
    takes as keyword arguments, and the sorted names of the others. A ``**kwargs`` target takes everything."""
    parameters = inspect.signature(target).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return dict(values), []
    keywords = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                         inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in values.items() if k in keywords}, sorted(set(values) - keywords)


def with_known_task_options(spec: dict, task_classes: dict | None) -> tuple[dict, list[str]]:
    """``spec`` with only the task options that its task's class (looked up in ``task_classes``, a revision's
    ``dara.tasks.TASK_CLASSES``) takes as keywords, and the names of those left out. Options added after an old
    revision, such as ``wrong_key_rate`` after bf5bb9d, would otherwise stop its task with a TypeError. A revision
    without ``TASK_CLASSES`` gets every option."""
    options = spec["settings"].get("task_options", {})
    if task_classes is None or not options:
        return spec, []
    kept, unknown = taken_as_keywords(task_classes[spec["coordinates"]["task"]], options)
    return {**spec, "settings": {**spec["settings"], "task_options": kept}}, unknown


def run_side(src: Path, spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_trainer", "--worker", json.dumps(spec)],
                          env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the trainer under {src} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["dara"]).resolve().is_relative_to(src.resolve()):
        raise RuntimeError(f"dara was imported from {result['dara']}, not from {src}")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=str(ROOT / "results/tiny/policies/toolcall/warm_start0"),
                        help="warm-start checkpoint (python -m dara.tiny.warmstart --experiment tiny --task toolcall)")
    parser.add_argument("--experiment", default="tiny")
    parser.add_argument("--task", default="toolcall")
    parser.add_argument("--method", default="dara_sym")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=5, help="training steps per repetition")
    parser.add_argument("--repeats", type=int, default=3, help="old/new pairs, run alternately")
    parser.add_argument("--sft-steps", type=int, default=10, help="supervised steps timed per repetition "
                        "(after 2 untimed; 0: none)")
    parser.add_argument("--matmul", choices=("torch", "openblas"), default=None,
                        help="the GEMM library of this checkout's policy (dara.tiny.gemm; default: the experiment's "
                             "warm_start.matmul for the task, what the pipeline runs; the old side's is torch)")
    parser.add_argument("--attention", choices=("sdpa", "openblas"), default=None,
                        help="what computes this checkout's policy's attention (dara.tiny.gemm; default: the "
                             "experiment's warm_start.attention; the old side's is sdpa)")
    parser.add_argument("--revision", default="028b1f6", help="git revision of the old trainer")
    parser.add_argument("--out", type=Path, default=None, help="also write the summary as Markdown here "
                        "(make bench-trainer: docs/results/bench_trainer.md, a README block)")
    history.add_arguments(parser)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if not (Path(args.policy) / "config.json").is_file():
        parser.error(f"no policy under {args.policy}; make one with python -m dara.tiny.warmstart "
                     f"--experiment {args.experiment} --task {args.task} --out {args.policy}")
    from dara.experiments import load_experiment, warm_start_settings
    from dara.runs import find_run

    experiment = load_experiment(args.experiment)
    run = find_run(experiment, args.task, args.method, args.group_size, args.seed)
    warm = warm_start_settings(experiment, args.task)
    args.matmul = args.matmul or warm.get("matmul", "torch")
    args.attention = args.attention or warm.get("attention", "sdpa")
    attention_text = "" if args.attention == "sdpa" else f", attention {args.attention}"
    run_text = (f"{args.task}, {args.method}, G{args.group_size}, {args.steps} steps each, matmul {args.matmul}"
                f"{attention_text}, one thread")
    history_file = history.history_path(args.out, args.history, args.no_history)
    baseline_revision = history.full_revision(args.revision, ROOT)[:7]
    recorded = history.start_run("bench_trainer", history.trainer_settings(run_text, args.repeats),
                                 sys.argv[1:] if argv is None else argv,
                                 baseline_revision) if history_file else None
    spec = {"coordinates": {"task": run.task, "method": run.method, "group_size": run.group_size, "seed": run.seed},
            "settings": {**run.settings, "steps": args.steps}, "policy": str(Path(args.policy).resolve()),
            "sft": {"steps": args.sft_steps, "warmup": 2, "batch_size": warm["sft_batch_size"],
                    "learning_rate": warm["sft_learning_rate"], "corpus_items": warm["corpus_items"]}
            if args.sft_steps else None}
    sft_text = f"{args.task} warm start, batches of {warm['sft_batch_size']}, {args.sft_steps} steps each"
    with tempfile.TemporaryDirectory() as old_root:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.revision, "src"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", old_root], input=archive, check=True)
        sides = {"old": Path(old_root) / "src", "new": ROOT / "src"}
        new_policy = policy_with_products(Path(spec["policy"]), args.matmul, args.attention, Path(old_root))
        specs = {"old": spec, "new": {**spec, "policy": str(new_policy)}}
        results: dict[str, list[dict]] = {"old": [], "new": []}
        print(f"{args.task} {args.method} G{args.group_size} seed {args.seed}, {args.steps} steps x {args.repeats} "
              f"repetitions, old = {args.revision}, one thread")
        for repeat in range(args.repeats):
            for side in ("old", "new"):
                result = run_side(sides[side], specs[side])
                if side == "new" and result["ignored"]:
                    raise SystemExit(f"this checkout's trainer does not take {result['ignored']} of the run's settings")
                results[side].append(result)
                if result["ignored"]:
                    print(f"  ({side} trainer does not know the settings {result['ignored']}: left out)")
                print(f"  rep {repeat} {side}: {sum(result['seconds']):6.2f} s for {args.steps} steps, mean response "
                      f"{result['response_length']:.1f} tokens", flush=True)

    ratios = [sum(o["seconds"]) / sum(n["seconds"]) for o, n in zip(results["old"], results["new"])]
    print(f"step time old/new: median {statistics.median(ratios):.2f}x "
          f"(per repetition: {', '.join(f'{r:.2f}x' for r in ratios)})")
    supervised = None
    if args.sft_steps:
        sft_ratios = [sum(o["sft_seconds"]) / sum(n["sft_seconds"]) for o, n in zip(results["old"], results["new"])]
        supervised = {"ratio": statistics.median(sft_ratios), "ratios": sft_ratios,
                      **{f"{side}_ms": 1e3 * statistics.mean(t for r in results[side] for t in r["sft_seconds"])
                         for side in ("old", "new")}}
        print(f"warm-start step old/new: median {supervised['ratio']:.2f}x (per repetition: "
              f"{', '.join(f'{r:.2f}x' for r in sft_ratios)}); old {supervised['old_ms']:.1f} ms, "
              f"new {supervised['new_ms']:.1f} ms")
    # the two sides' responses differ (another sampler, other settings left out), and a step's cost grows with them
    table = ["| trainer | ms per step | mean response (tokens) | sampling | log-probs outside the update | update "
             "| other |", "|---|---|---|---|---|---|---|"]
    summary = {}
    for side in ("old", "new"):
        total = sum(sum(r["seconds"]) for r in results[side])
        shares = {phase: sum(r["phases"][phase] for r in results[side]) / total for phase in PHASES}
        shares["other"] = 1 - sum(shares.values())
        per_step = total / (args.steps * args.repeats)
        print(f"  {side}: {per_step * 1e3:7.1f} ms per step; " + ", ".join(
            f"{phase} {share:5.1%}" for phase, share in shares.items()))
        name = f"revision {args.revision}" if side == "old" else "this checkout"
        length = statistics.mean(r["response_length"] for r in results[side])
        summary[side] = {"ms_per_step": per_step * 1e3, "response_length": length,
                         **{PHASE_NAMES[phase]: share * 100 for phase, share in shares.items()}}
        table.append(f"| {name} | {per_step * 1e3:.0f} | {length:.1f} | "
                     + " | ".join(f"{share:.0%}" for share in shares.values()) + " |")
    left_out = {side: sorted({name for r in results[side] for name in r["ignored"]}) for side in results}
    notes = "".join(f"\nThe {side} trainer ran without what it does not know: {', '.join(names)}.\n"
                    for side, names in left_out.items() if names)
    rows = history.run_rows(recorded, history.trainer_measurements(
        summary, statistics.median(ratios), ratios, left_out, baseline_revision, supervised)) if recorded else None
    if args.out:
        from dara.io import write_text_atomic

        supervised_text = "" if supervised is None else (
            f"\nWarm-start step old/new: **{supervised['ratio']:.2f}x** (median of {len(supervised['ratios'])} "
            f"interleaved repetitions: {', '.join(f'{r:.2f}x' for r in supervised['ratios'])}; {sft_text}): "
            f"{supervised['old_ms']:.1f} ms at revision {args.revision}, {supervised['new_ms']:.1f} ms in this "
            "checkout.\n")
        write_text_atomic(args.out, f"Step time old/new: **{statistics.median(ratios):.2f}x** (median of {len(ratios)} "
                          f"interleaved repetitions: {', '.join(f'{r:.2f}x' for r in ratios)}; {run_text}).\n\n"
                          + "\n".join(table) + "\n" + notes + supervised_text)
    history.record(history_file, rows)


if __name__ == "__main__":
    main()
