"""Held-out evaluation on CPU of every checkpoint of tiny-policy runs (a task's runs at one G per process): the tiny
and TRL trainers' runs, and verl's runs at the verl_cpu scale.

    python -m dara.evaluation.tiny_heldout --experiment tiny --run-dir results/tiny/runs/toolcall/dara_sym/G8/seed0 ...

One process loads torch once and evaluates `checkpoints/step{N}/` for every N of the run's checkpoint steps
(`dara.runs.Run.checkpoint_steps`), writing `step{N}.json` each into the run's evaluation folder
(`dara.runs.Run.eval_dir`; atomically; existing files made with the same settings are kept, so a rerun resumes, and one
made with other settings is an error). The held-out items are the task's `heldout` split (disjoint from training), the
same for every run; each item is sampled `samples` times with the experiment's `evaluation` settings (temperature,
top-p, seed; defaults in the experiment schema), `final_samples` times at the run's last checkpoint and
`warm_start_samples` times at step 0 (below). A trained checkpoint is sampled with the evaluation's seed plus its run's
seed, so that runs of different seeds draw independently and runs of one seed, whatever their method, draw alike.
Scorers, as at paper scale:
- toolcall / toolcall3: items become BFCL entries (tool docs + possible answers; no-tool items are
  irrelevance entries) scored by bfcl-eval's AST checker in the .venv-bfcl environment (one subprocess for
  all checkpoints), plus the format metric of the paper's BFCL protocol (docs/evaluation.md);
- math_length: strict grader (math-verify) OR exact numeric fallback; exceed / joint against the task's
  token budget;
- act_critic: rates of the expert action, of another admissible action and of the action tag, and the
  mean ACT composite reward.
Every task also reports the mean of each training reward on the held-out samples (`rewards`).

Step 0 of every CPU trainer's run is one of its task's warm-start policies (`dara.runs.Run.warm_start`): the base
that every "points above the base" and every drift control is measured against. One sample per item would give it
the sampling error of a single checkpoint (about 4.6 points of BFCL tool accuracy on 87 tool items) in every
comparison, so it gets `warm_start_samples`, and it is evaluated once per warm start, not once per job:

    python -m dara.evaluation.tiny_heldout --experiment tiny --warm-start toolcall --warm-start-index 0
    # -> policies/toolcall/warm_start0/heldout_eval/step0.json

writes the warm-start policy's `step0.json`, and an evaluation job given it (`--warm-start-eval`) copies it into each
run's `step0.json` when the run's step-0 checkpoint has the same files (SHA-256), task options, response cap and
sampling; otherwise the job samples that checkpoint itself. The last checkpoint, a run's final reading (the held-out
claims, the drift control's difference from the base), gets `final_samples` for the same reason (docs/evaluation.md);
the checkpoints between keep `samples`. Within a process, checkpoints with the same files and sampling are sampled
once: generation is a deterministic function of the weights, the prompts and the sampling seed, so the texts are
reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from dara.io import write_json_atomic
from dara.kernels import machine_record
from dara.provenance import git_revision
from dara.runs import Run, WarmStart


def default_bfcl_python() -> Path:
    if "DARA_BFCL_PYTHON" in os.environ:
        return Path(os.environ["DARA_BFCL_PYTHON"])
    return Path(__file__).resolve().parents[3] / ".venv-bfcl" / "bin" / "python"


def bfcl_entry(item: Mapping, case_id: str, output: str) -> dict:
    """A tool-calling task item as a custom BFCL case: its tool docs and, as possible answers, the expected
    call's values (an optional parameter the expected call leaves out must be left out too, "" in bfcl-eval's
    notation); an item whose answer calls no tool is an irrelevance case."""
    calls = item["calls"]
    case = {"id": case_id, "function": [dict(tool) for tool in item["tools"]], "outputs": output}
    if not calls:
        return {**case, "category": "irrelevance", "ground_truth": []}
    docs = {tool["name"]: tool["parameters"] for tool in item["tools"]}
    answers = []
    for call in calls:
        parameters = docs[call["name"]]
        arguments = call.get("arguments", call.get("parameters"))
        accepted = {name: [value] for name, value in arguments.items()}
        for name in parameters.get("properties", {}):
            if name not in accepted and name not in parameters.get("required", []):
                accepted[name] = [""]  # bfcl-eval's marker: may be omitted
        answers.append({call["name"]: accepted})
    # bfcl-eval's category names say which checker applies: several offered tools -> "multiple" (pick by
    # name), several expected calls -> "parallel" (any order).
    several_tools, several_calls = len(item["tools"]) > 1, len(calls) > 1
    category = {(False, False): "simple", (True, False): "multiple",
                (False, True): "parallel", (True, True): "parallel_multiple"}[(several_tools, several_calls)]  # fmt: skip
    return {**case, "category": category, "ground_truth": answers}


def score_bfcl(cases: list[dict], bfcl_python: Path) -> dict[str, dict]:
    """Run `dara.evaluation.bfcl_score` in the bfcl environment; verdicts by case id."""
    if not bfcl_python.exists():
        raise FileNotFoundError(f"no bfcl environment at {bfcl_python} (build it with `make setup`, or set DARA_BFCL_PYTHON)")
    with tempfile.TemporaryDirectory(prefix="dara-bfcl-") as scratch:
        source, target = Path(scratch) / "outputs.json", Path(scratch) / "scores.json"
        source.write_text(json.dumps({"cases": cases}))
        result = subprocess.run(
            [str(bfcl_python), "-m", "dara.evaluation.bfcl_score", "--outputs", str(source), "--out", str(target)],
            capture_output=True, text=True, env={**os.environ, "BFCL_PROJECT_ROOT": scratch},
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"bfcl scoring failed:\n{result.stderr[-4000:]}")
        return {case["id"]: case for case in json.loads(target.read_text())["cases"]}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _both_steps(text: str, a: int, b: int, c: int) -> bool:
    """Whether a math response writes the first step ``a + b = s.`` and then a second step ``s' - c = r.``
    (any numbers s, s', r: their values are accuracy's business)."""
    return re.search(rf"\b{a} \+ {b} = -?\d+\.\s.*?\b-?\d+ - {c} = -?\d+\.", text, flags=re.DOTALL) is not None


def task_metrics(task, items: Sequence[Mapping], texts: Sequence[str], lengths: Sequence[int],
                 max_new_tokens: int) -> dict[str, float]:
    """Task-specific held-out metrics other than BFCL's (which need the subprocess)."""
    if task.name == "math_length":
        from dara.evaluation.math_eval import grade

        correct = grade(texts, [item["answer"] for item in items])
        # Without an end-of-sequence token the answer was cut off: wrong, as a truncated sample at paper scale.
        truncated = [n >= max_new_tokens for n in lengths]
        within = [n <= task.length_budget for n in lengths]
        ok = [c and not t for c, t in zip(correct, truncated)]
        # The shortcut a length budget invites: boxing an answer without writing both steps, "a + b = s." and
        # "s - c = r." (a skipped second step is right only when c = 0). A step's form is what counts, not its
        # numbers: a wrong sum is an arithmetic error, which accuracy counts. Responses that box nothing are not
        # counted as taking the shortcut.
        skipped = ["\\boxed{" in text and not _both_steps(text, a, b, c) for text, (a, b, c) in
                   zip(texts, (item["operands"] for item in items))]
        return {"accuracy": _mean(ok), "exceed": 1 - _mean(within), "joint": _mean(o and w for o, w in zip(ok, within)),
                "skipped_step": _mean(skipped),
                "short_wrong": _mean(w and not o for o, w in zip(ok, within))}
    if task.name == "act_critic":
        # Rates in [0, 1]: expert action chosen, another admissible action chosen, action tag present
        # (the format channel is 0 with the tag and a -0.5 penalty without); composite is the mean reward.
        rewards = task.score(texts, items, lengths)
        return {"accuracy": float((rewards[:, 0] > 0).mean()), "admissible": float((rewards[:, 1] > 0).mean()),
                "format": float((rewards[:, 2] == 0).mean()), "composite": float(rewards.sum(axis=1).mean())}  # fmt: skip
    return {}


def evaluate_runs(runs: Sequence[Run | WarmStart], *, heldout_items: int, samples: int, final_samples: int,
                  warm_start_samples: int, temperature: float, top_p: float, seed: int,
                  bfcl_python: Path | None = None, warm_start_evals: Sequence[Path] = (),
                  first_and_last: bool = False) -> list[Path]:
    """Evaluate every checkpoint of several runs in one process, with an experiment's ``evaluation`` settings
    (heldout_items, samples, final_samples for each run's last checkpoint, warm_start_samples for step 0,
    temperature, top_p, seed).

    ``runs``: `dara.runs.Run` of any backend whose checkpoints are Hugging Face folders of a tiny policy (the CPU
    trainers' and verl's on CPU), or a `dara.runs.WarmStart` policy; ``first_and_last``: only each run's first and
    last checkpoint (a pilot's before and after).

    Importing torch and bfcl-eval costs seconds per process, more than a tiny run's generation, so one job
    evaluates every run of a task at one G (`dara.runs.evaluation_jobs`) and every tool-calling output of all its
    checkpoints goes to one bfcl-eval subprocess.
    ``warm_start_evals``: warm-start evaluations (``--warm-start``) to copy where a step-0 checkpoint matches one.
    Checkpoints whose evaluation file exists are skipped (a rerun resumes).
    """
    import torch

    torch.set_num_threads(1)
    if min(samples, final_samples, warm_start_samples, heldout_items) < 1:
        raise ValueError("samples, final_samples, warm_start_samples and heldout_items must be >= 1, got "
                         f"{samples}, {final_samples}, {warm_start_samples}, {heldout_items}")
    shared: dict[str, tuple[Path, dict]] = {}
    for path in warm_start_evals:
        try:
            record = json.loads(Path(path).read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not a warm-start evaluation (not JSON: {error})") from None
        if not isinstance(record, dict) or "evaluation_key" not in record:
            raise ValueError(f"{path} is not a warm-start evaluation (no evaluation_key); rerun --warm-start")
        shared[record["evaluation_key"]] = (Path(path), record)
    written: list[Path] = []
    pending: dict[tuple[int, int], tuple[Path, dict]] = {}
    bfcl_cases: list[dict] = []
    generated: dict[str, tuple[list[str], list[int]]] = {}
    for run_number, run in enumerate(runs):
        steps = list(run.checkpoint_steps)
        if first_and_last:
            steps = sorted({steps[0], steps[-1]})
        run_written, run_pending, run_cases = _generate_run(
            run, steps, f"run{run_number}/", heldout_items, (samples, final_samples, warm_start_samples), temperature,
            top_p, seed, generated, shared)
        written += run_written
        pending.update({(run_number, step): value for step, value in run_pending.items()})
        bfcl_cases += run_cases
    if bfcl_cases:
        verdicts = score_bfcl(bfcl_cases, bfcl_python or default_bfcl_python())
        by_checkpoint: dict[str, list[dict]] = {}
        for case_id, verdict in verdicts.items():
            by_checkpoint.setdefault(case_id.rsplit("/", 1)[0], []).append(verdict)
        for (run_number, step), (_, record) in pending.items():
            mine = by_checkpoint.get(f"run{run_number}/step{step}")
            if mine is None:
                continue  # not a tool-calling run
            irrelevance = [v["valid"] for v in mine if v["category"] == "irrelevance"]
            tool = [v["valid"] for v in mine if v["category"] != "irrelevance"]
            record["metrics"].update({
                "bfcl_accuracy": _mean(v["valid"] for v in mine),
                "bfcl_format": _mean(v["format"] for v in mine),
                # NaN when the held-out items hold no case of the kind (analysis/table1.py then leaves it out)
                "bfcl_accuracy_tool": _mean(tool) if tool else float("nan"),
                "bfcl_accuracy_irrelevance": _mean(irrelevance) if irrelevance else float("nan"),
            })  # fmt: skip
    for target, record in pending.values():
        write_json_atomic(target, record)
    return written


# The files that fix what a checkpoint generates: architecture, weights, generation defaults and vocabulary, and of
# tokenizer_config.json its special tokens (end of sequence, padding): a save_pretrained round trip adds default
# keys to the rest of that file, so the warm-start folder and its runs' step-0 copies differ there only.
GENERATION_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json")


def _checkpoint_digest(checkpoint: Path) -> str:
    """SHA-256 over a checkpoint's GENERATION_FILES (those it has) and its tokenizer's special tokens."""
    digest = hashlib.sha256()
    for name in GENERATION_FILES:
        path = checkpoint / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    tokenizer_config = checkpoint / "tokenizer_config.json"
    if tokenizer_config.is_file():
        special = {k: v for k, v in json.loads(tokenizer_config.read_text()).items() if k.endswith("_token")}
        digest.update(b"special tokens\0" + json.dumps(special, sort_keys=True).encode())
    return digest.hexdigest()


def _generate_run(run: Run | WarmStart, steps: Sequence[int], case_prefix: str, heldout_items: int,
                  sample_counts: tuple[int, int, int], temperature: float, top_p: float, seed: int,
                  generated: dict[str, tuple[list[str], list[int]]], shared: Mapping[str, tuple[Path, dict]]):
    """Generate and score one run's unevaluated checkpoints; BFCL cases are returned for batch scoring.
    ``sample_counts``: samples per item between the ends, at the run's last checkpoint, at step 0 (the warm start).
    ``generated`` maps an evaluation key (checkpoint files, task, options, length cap, sampling) to texts already
    sampled in this process; ``shared`` maps it to a warm-start evaluation to copy."""
    from dara.tasks import get_task
    from dara.tasks.toolcall import ToolCallTask
    from dara.tiny.policy import generate, load_policy

    task_options = run.settings["task_options"]
    task = get_task(run.task, **task_options)
    items = task.items("heldout", heldout_items, seed=0)
    tool_task = isinstance(task, ToolCallTask)
    written, pending, bfcl_cases = [], {}, []
    samples, final_samples, warm_start_samples = sample_counts
    last_step = run.checkpoint_steps[-1]
    revision = git_revision()  # the sampler and scorers are code: a result says which code made it
    machine = machine_record()  # and the CPU and kernel dispatch sampled it (a pinned job checks its pin here)
    coordinates = {"task": run.task, "method": run.method, "group_size": run.group_size, "seed": run.seed,
                   "warm_start": run.warm_start}
    for step in steps:
        target = Path(run.eval_file(step))
        written.append(target)
        per_item = warm_start_samples if step == 0 else final_samples if step == last_step else samples
        # Step 0 (the warm start, shared by every run) is sampled with the evaluation's seed; a trained checkpoint
        # with that seed plus its run's: one seed for all runs would give every run's evaluation the same random
        # draws, whose error a median over seeds then cannot average out; runs of one seed share theirs (paired).
        sampling = {"temperature": temperature, "top_p": top_p, "seed": seed if step == 0 else seed + run.seed,
                    "max_new_tokens": run.max_new_tokens}
        if target.exists():  # a rerun resumes, but only over evaluations made with these settings
            _check_kept(target, {"heldout_items": len(items), "samples_per_item": per_item, "sampling": sampling})
            continue
        checkpoint = Path(run.checkpoint_dir(step))
        if not (checkpoint / "config.json").is_file():
            raise FileNotFoundError(f"no Hugging Face checkpoint (config.json) under {checkpoint}")
        digest = _checkpoint_digest(checkpoint)
        key = json.dumps([digest, run.task, task_options, len(items), per_item, sampling], sort_keys=True)
        if key in shared:
            source, record = shared[key]
            pending[step] = (target, {**record, **coordinates, "step": step, "checkpoint": str(checkpoint),
                                      "copied_from": str(source)})
            continue
        repeated = [item for item in items for _ in range(per_item)]
        if key not in generated:
            tokenizer, model = load_policy(checkpoint)
            generated[key] = generate(model, tokenizer, [item["prompt"] for item in repeated], seed=sampling["seed"],
                                      max_new_tokens=run.max_new_tokens, temperature=temperature, top_p=top_p)
        texts, lengths = generated[key]
        rewards = task.score(texts, repeated, lengths)
        pending[step] = (target, {
            **coordinates, "step": step, "checkpoint": str(checkpoint), "checkpoint_sha256": digest,
            "evaluation_key": key, "heldout_items": len(items), "samples_per_item": per_item,
            "code_revision": revision, "machine": machine, "sampling": sampling,
            "rewards": {name: float(rewards[:, k].mean()) for k, name in enumerate(task.reward_names)},
            "metrics": task_metrics(task, repeated, texts, lengths, run.max_new_tokens),
        })  # fmt: skip
        if tool_task:
            bfcl_cases += [bfcl_entry(item, f"{case_prefix}step{step}/{n}", text)
                           for n, (item, text) in enumerate(zip(repeated, texts))]
    return written, pending, bfcl_cases


def _check_kept(target: Path, expected: Mapping) -> None:
    """An existing evaluation file is kept (a rerun resumes) only where it was made with ``expected`` (held-out
    items, samples per item, sampling); otherwise a ValueError names what differs, rather than a table that mixes
    settings or a result silently replaced."""
    try:
        record = json.loads(target.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{target} exists but is not an evaluation (not JSON: {error}); remove it to evaluate "
                         "again") from None
    differ = {key: (record.get(key), value) for key, value in expected.items() if record.get(key) != value}
    if differ:
        found = ", ".join(f"{key} {old!r} where these settings give {new!r}" for key, (old, new) in differ.items())
        raise ValueError(f"{target} was evaluated with other settings ({found}); remove it to evaluate again")


def main(argv: Sequence[str] | None = None) -> None:
    from dara.experiments import load_experiment
    from dara.runs import add_run_arguments, runs_from_arguments

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # --experiment also gives --warm-start's policy, and the evaluation settings unless --evaluation does
    add_run_arguments(parser).add_argument("--warm-start", metavar="TASK",
                                           help="evaluate --experiment's warm-start policy of TASK")
    parser.add_argument("--warm-start-index", type=int, default=0, metavar="K",
                        help="with --warm-start: which of the task's warm starts (default 0)")
    parser.add_argument("--evaluation", help="the experiment's evaluation settings as JSON (the workflow's)")
    parser.add_argument("--warm-start-eval", type=Path, nargs="*", default=[],
                        help="warm-start evaluations (written by --warm-start) to copy into matching step-0 files")
    parser.add_argument("--bfcl-python", type=Path, default=None, help="python of the bfcl environment")
    args = parser.parse_args(argv)
    if args.experiment is None and (args.warm_start or args.evaluation is None):
        parser.error("--experiment is needed with --warm-start, and where --evaluation does not give the settings")
    experiment = load_experiment(args.experiment) if args.experiment else None
    try:
        evaluation = json.loads(args.evaluation) if args.evaluation else experiment["evaluation"]
    except json.JSONDecodeError as error:
        parser.error(f"--evaluation must be the evaluation settings as a JSON object: {error}")
    if args.warm_start:
        to_evaluate = [WarmStart.of(experiment, args.warm_start, warm_start=args.warm_start_index)]
    else:
        to_evaluate = runs_from_arguments(args, parser)
    evaluate_runs(to_evaluate, bfcl_python=args.bfcl_python, warm_start_evals=args.warm_start_eval, **evaluation)


if __name__ == "__main__":
    main()
