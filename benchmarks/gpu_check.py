"""The paper path on a GPU in a few minutes: ``make gpu-check`` (``DEVICE=cuda``); on a machine without a GPU, the
same check as a CPU dry run, ``make gpu-check DEVICE=cpu`` (docs/gpu_check.md).

    python -m benchmarks.gpu_check --device cuda [--out results/gpu_check] [--data-dir results/verl_cpu/data]

Parts, each passed or failed, in this order (the cheap and likely ones first, so that a run cut short by its time
limit still answers them):

1. ``parity``: every method of `dara.methods.METHODS` (each one's registered estimator) on the device against the
   CPU, on the same rewards (tolerance `ESTIMATOR_TOLERANCE`); the tiny policy's log-probs on the device against the
   CPU (`LOGPROB_TOLERANCE`), the device's sampler against a fresh forward there (the trainer's old log-probs), and
   the sampler's draws (one seed: the same responses in at least `SAME_RESPONSES` of the rows); a short tiny-trainer
   run on the device (`dara.tiny.trainer`, ``device``) beside the same run on the CPU.
2. ``trl``: ``python -m dara.trl.train --device <device>`` with three methods (GRPO, GDPO, DARA-Asym).
3. ``verl``: verl's real training loop (``python -m dara.verl_backend.launch train``: the dara_sync V1 trainer,
   FSDP2, a reference policy, the ``hf`` rollout) with GDPO and DARA-Asym. On the CPU it is the verl_cpu scale's
   set-up (`dara.verl_plugin.cpu`: float32); on a GPU `dara.verl_plugin.cpu.GPU_HF_OVERRIDES` (bf16 mixed precision,
   the rollout's model on the GPU in bf16, SDPA attention). Each run writes metrics.parquet, verl's checkpoints and
   their Hugging Face exports (``checkpoints/step<N>``), as at every scale.

The runs are the verl_cpu scale's tool-calling runs (experiments/verl_cpu.yaml: its settings, task, warm start,
seed 0), shortened to ``--steps`` (default `DEFAULT_STEPS`, on a GPU and in the CPU dry run alike) and written to
``<out>/gpu_check/`` with the experiment file that describes them (``<out>/experiment.yaml``). They start from ``<data-dir>/toolcall/`` (``train.parquet``,
``test.parquet``, ``policy/``), which ``make gpu-bundle`` ships and ``make verl-cpu`` (or
``snakemake results/verl_cpu/data/toolcall/train.parquet --config scale=verl_cpu``) makes; where it is missing the
check builds it first (the verl_cpu warm start: a minute or two on one core).

The summary (``<out>/summary.md``, also printed) names the device (GPU name or CPU model), the versions, each part's
checks with their numbers and tolerances, step times, and each run's first and last metrics rows; it is written
again after each part, so a run stopped by ``--time-limit`` (or killed) leaves what it did. The exit status is 1
when any part failed or did not run. Nothing here reaches the network, and nothing imports Snakemake or
math-verify (the tool-calling task's rewards need neither).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.metadata
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEVICES = ("cuda", "cpu")
DEFAULT_STEPS = 10
DEFAULT_TIME_LIMIT_S = {"cuda": 480, "cpu": 3600}  # the budget on a GPU: 8 minutes
TASK = "toolcall"
VERL_METHODS = ("gdpo", "dara_asym")
TRL_METHODS = ("grpo", "gdpo", "dara_asym")
VERSIONED = ("torch", "verl", "transformers", "tokenizers", "trl", "ray", "accelerate", "numpy", "pandas")

# Tolerances (absolute) of the parity part. The estimators compute in float64 and return float32: on another device
# only the summation order of the last float64 bits differs, far below float32's resolution of the outputs (about
# 1e-7 at magnitude 1). The tiny policy computes in float32, whose rounding in these log-probs is about 1e-6 (the
# sampler's against a fresh forward, tests/test_tiny_trainer.py); a GPU's matrix products sum in other orders (TF32
# stays off: torch's default for float32 matrix products).
ESTIMATOR_TOLERANCE = 1e-6
LOGPROB_TOLERANCE = 1e-4
# The sampler draws its uniforms from the CPU generator on every device, so one seed gives the same responses unless
# a uniform falls within float rounding of a token's cumulative-probability boundary (then that row differs from there).
SAME_RESPONSES = 0.9
# verl's training/rollout_probs_diff_mean: |p_rollout - p_actor| per response token between the rollout's and the
# actor's probabilities of the sampled tokens, both with the step's weights. On the CPU both compute in float32 (the
# end-to-end test's bound); on a GPU the rollout serves in bf16 and the actor computes with bf16 mixed precision.
PROBS_DIFF_BOUND = {"cpu": 1e-3, "cuda": 5e-2}
# Columns of the first and last metrics rows in the summary (those a run has).
SUMMARY_COLUMNS = ("step", "reward/format", "reward/correctness", "reward/sum", "density/format",
                   "density/correctness", "weight/format", "weight/correctness", "response_length", "entropy", "kl",
                   "seconds", "verl/actor/grad_norm", "verl/training/rollout_probs_diff_mean")


# --- checks and the summary (pure: tests/test_gpu_check.py) -----------------------------------------------------------

@dataclass
class Check:
    """One verdict of a part; ``detail`` says what was measured against what."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class Part:
    """One part of the check: its verdicts, what it measured, how long it took."""

    name: str
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    seconds: float | None = None
    ran: bool = True

    @property
    def passed(self) -> bool:
        return self.ran and bool(self.checks) and all(check.passed for check in self.checks)

    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(passed), detail))
        return bool(passed)

    def fail(self, name: str, error: BaseException | str) -> None:
        """A failed check from an exception or a text; a text of several lines (a traceback, a log's tail) is kept
        as a note, its last line is the verdict's detail."""
        text = (error if isinstance(error, str) else f"{type(error).__name__}: {error}").strip() or "failed"
        self.check(name, False, text.splitlines()[-1][:400])
        if "\n" in text:
            self.notes.append(f"{name}:\n\n```\n{text[-3000:]}\n```")


def max_abs_difference(reference, candidate) -> float:
    """The largest |reference - candidate| over two tensors (any devices, any float dtype), in float64; NaN in both
    at one place counts as equal, NaN in one only as infinitely far, and so do different shapes."""
    import torch

    a = torch.as_tensor(reference).detach().to("cpu", torch.float64)
    b = torch.as_tensor(candidate).detach().to("cpu", torch.float64)
    if a.shape != b.shape:
        return math.inf
    both_nan = torch.isnan(a) & torch.isnan(b)
    difference = (a - b).abs().masked_fill(both_nan, 0.0)
    if bool(torch.isnan(difference).any()):
        return math.inf
    return float(difference.max()) if difference.numel() else 0.0


def within(part: Part, name: str, reference, candidate, tolerance: float) -> bool:
    """Check that two tensors agree to ``tolerance`` (absolute), recording the largest difference."""
    difference = max_abs_difference(reference, candidate)
    return part.check(name, difference <= tolerance, f"max |diff| {difference:.3g} (tolerance {tolerance:g})")


def metrics_rows_table(frame, columns=SUMMARY_COLUMNS) -> str:
    """The first and last rows of a metrics frame as a Markdown table, in ``columns`` (those it has)."""
    shown = [column for column in columns if column in frame.columns]
    if frame.empty or not shown:
        return "(no metrics rows)"
    rows = frame.iloc[[0, len(frame) - 1]] if len(frame) > 1 else frame.iloc[[0]]

    def cell(value) -> str:
        if isinstance(value, float):
            return "nan" if math.isnan(value) else f"{value:.4g}"
        return str(value)

    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(row[column]) for column in shown) + " |" for _, row in rows.iterrows()]
    return "\n".join(lines)


def summary_markdown(environment: dict[str, Any], parts: list[Part]) -> str:
    """The check's report: its verdict, the machine and versions, then each part's checks, notes and tables."""
    verdict = "PASS" if parts and all(part.passed for part in parts) else "FAIL"
    lines = [f"# GPU check: {verdict}", ""]
    lines += [f"- {key}: {value}" for key, value in environment.items()]
    lines += ["", "| part | verdict | seconds |", "|---|---|---|"]
    for part in parts:
        status = "PASS" if part.passed else ("not run" if not part.ran else "FAIL")
        seconds = "" if part.seconds is None else f"{part.seconds:.0f}"
        lines.append(f"| {part.name} | {status} | {seconds} |")
    for part in parts:
        lines += ["", f"## {part.name}", ""]
        if not part.ran:
            lines.append("not run: " + ("; ".join(part.notes) or "no time left"))
            continue
        lines += [f"- {'PASS' if check.passed else 'FAIL'} {check.name}" + (f": {check.detail}" if check.detail else "")
                  for check in part.checks]
        for note in part.notes:
            lines += ["", note]
        for table in part.tables:
            lines += ["", table]
    return "\n".join(lines) + "\n"


def exit_status(parts: list[Part]) -> int:
    """0 when every part ran and passed, else 1."""
    return 0 if parts and all(part.passed for part in parts) else 1


# --- the machine ------------------------------------------------------------------------------------------------------

def versions() -> dict[str, str]:
    found = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def device_description(device: str) -> str:
    import torch

    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        driver = ""
        try:
            driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                    capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            driver = "unknown (no nvidia-smi)"
        return (f"{properties.name}, {properties.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda} (torch's), "
                f"driver {driver}")
    from dara.kernels import cpu

    info = cpu()
    return f"CPU: {info['model_name'] or 'unknown model'}, {info['logical_cpus']} logical CPUs"


def plugin_entry_point_installed() -> bool:
    """Whether dara's ``verl.plugins`` entry point is in the package metadata (``pip install -e .`` writes it; a
    checkout put on PYTHONPATH, as the GPU bundle does, has none)."""
    return any(point.name == "dara" for point in importlib.metadata.entry_points(group="verl.plugins"))


# --- the runs ---------------------------------------------------------------------------------------------------------

def check_experiment(device: str, steps: int, data_dir: Path, extra_verl: dict[str, Any]) -> dict[str, Any]:
    """The verl_cpu scale's tool-calling runs for this check: verl with GDPO and DARA-Asym, TRL with three methods,
    seed 0, ``steps`` steps, checkpoints at half-way and at the end, on ``device``."""
    import yaml

    experiment = yaml.safe_load((ROOT / "experiments" / "verl_cpu.yaml").read_text())
    experiment["scale"] = "gpu_check"
    experiment["description"] = f"make gpu-check on {device}: the verl_cpu scale's tool-calling runs, {steps} steps"
    experiment.pop("analysis", None)
    experiment["tasks"] = {TASK: experiment["tasks"][TASK]}
    settings = experiment["settings"]
    settings.update(steps=steps, eval_every=max(1, steps // 2))
    paper = settings["paper"]
    paper["device"] = device
    paper["data_dir"] = str(data_dir)
    model = {"hf_id": str(data_dir / TASK / "policy"),
             "resources": {"nodes": 1, "gpus_per_node": 1, "gpu_model": "gpu" if device == "cuda" else "cpu",
                           "runtime_minutes": 10}}
    if not plugin_entry_point_installed():
        # verl loads the plugin through dara's entry point, which only an installed dara has; the same module named
        # in VERL_USE_EXTERNAL_MODULES registers it in every verl process (the CPU backend's variable, merged)
        model["env"] = {"VERL_USE_EXTERNAL_MODULES": "dara.verl_plugin.entry"}
    paper["models"] = {"tiny_tool": model}
    paper["primary_models"] = {TASK: "tiny_tool"}
    paper["target_models"] = {TASK: ["tiny_tool"]}
    if device == "cuda":
        paper["verl"]["actor_rollout_ref.rollout.name"] = "hf"  # selects GPU_HF_OVERRIDES (no vLLM here)
    paper["verl"].update(extra_verl)
    experiment["targets"] = {
        TASK: {"description": "verl's loop", "task": TASK, "methods": list(VERL_METHODS), "group_sizes": [4],
               "seeds": [0]},
        f"{TASK}_trl": {"description": "dara.trl", "task": TASK, "backend": "trl", "methods": list(TRL_METHODS),
                        "group_sizes": [4], "seeds": [0]},
    }
    return experiment


def existing_data(data_dir: Path, part: Part) -> Path:
    """``data_dir`` if it holds the task's verl data and policy; a FileNotFoundError naming what is missing."""
    wanted = [data_dir / TASK / name for name in ("train.parquet", "test.parquet", "policy/config.json")]
    if all(path.is_file() for path in wanted):
        part.notes.append(f"data: {data_dir / TASK}")
        return data_dir
    raise FileNotFoundError(", ".join(str(path) for path in wanted if not path.is_file()))


def build_data(out: Path, part: Part) -> Path:
    """The verl_cpu scale's tool-calling warm start and verl data, built under ``out``/data (as its workflow
    builds them: `dara.tiny.warmstart`, then `dara.verl_backend.tiny_data.prepare` with the scale's prompt pool)."""
    from dara.experiments import load_experiment, warm_start_settings
    from dara.tiny.warmstart import warm_start
    from dara.verl_backend.tiny_data import prepare

    started = time.perf_counter()
    experiment = load_experiment("verl_cpu")
    settings = warm_start_settings(experiment, TASK)
    policy = out / "policies" / TASK / "warm_start0"
    if not (policy / "warmstart.json").is_file():
        warm_start(out=policy, **settings)
    data_dir = out / "data"
    prepare(TASK, settings["task_options"], policy, data_dir / TASK,
            train_items=int(experiment["settings"]["prompt_pool"]))
    part.notes.append(f"data: built here in {time.perf_counter() - started:.0f} s ({data_dir / TASK})")
    return data_dir


def _run_logged(command: list[str], log: Path, timeout: float, env: dict[str, str], cwd: Path) -> int | None:
    """Run ``command`` in its own session with its output in ``log``; its return code, or None if it outlived
    ``timeout`` seconds (then its whole process group is killed)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as output:
        output.write("$ " + shlex.join(command) + "\n")
        output.flush()
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                   start_new_session=True)
        try:
            return process.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None


def _log_tail(log: Path, characters: int = 3000) -> str:
    return log.read_text(errors="replace")[-characters:] if log.is_file() else "(no log)"


def _subprocess_env() -> dict[str, str]:
    """This process's environment, with the ``dara`` it runs first on PYTHONPATH (a job imports this very code)."""
    from dara.verl_plugin.cpu import source_root

    source = str(source_root())
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != source]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([source, *paths])}


def check_run_outputs(part: Part, run, steps: int, label: str) -> Any:
    """The files every scale's run writes: metrics.parquet with rows 0..steps-1 and finite rewards, and a Hugging Face
    checkpoint at each of the run's checkpoint steps. Returns the metrics frame (None if missing)."""
    import pandas as pd

    folder = Path(run.run_dir)
    metrics = Path(run.metrics)
    if not part.check(f"{label}: metrics.parquet written", metrics.is_file(), str(metrics)):
        return None
    frame = pd.read_parquet(metrics)
    part.check(f"{label}: rows are steps 0..{steps - 1}", frame["step"].tolist() == list(range(steps)),
               f"steps {frame['step'].tolist()}")
    rewards = [column for column in frame.columns if column.startswith("reward/")]
    part.check(f"{label}: rewards finite", bool(rewards) and bool(frame[rewards].notna().all().all())
               and bool(frame[rewards].abs().lt(math.inf).all().all()), ", ".join(rewards))
    expected = run.checkpoint_steps
    missing = [step for step in expected if not (folder / "checkpoints" / f"step{step}" / "config.json").is_file()]
    part.check(f"{label}: checkpoints", not missing,
               f"steps {expected}" + (f"; missing {missing}" if missing else ""))
    part.tables.append(f"{label} ({folder}):\n\n" + metrics_rows_table(frame))
    return frame


# --- part 1: parity ---------------------------------------------------------------------------------------------------

def estimator_parity(part: Part, device: str) -> None:
    """Every method's advantages, loss weights and metrics on ``device`` against the CPU, for rewards that look like
    the tasks' (a sparse binary channel, a ternary one, a continuous one), in verl's contiguous groups and in
    shuffled ones, with each batch normalisation the method has."""
    import numpy as np
    import torch

    from dara.advantages import BATCH_NORMS, EstimatorOptions, compute_advantages
    from dara.methods import METHODS, get_method

    rng = np.random.default_rng(0)
    groups, size = 12, 8
    rewards = np.stack([(rng.random(groups * size) < 0.15).astype(float),
                        rng.choice([-3.0, 0.0, 3.0], groups * size),
                        rng.random(groups * size)], axis=1)
    rewards[:size] = rewards[0]  # one group that scores every response alike on every channel
    lengths = rng.integers(5, 49, groups * size)
    layouts = {"contiguous groups": np.repeat(np.arange(groups), size),
               "shuffled groups": rng.permutation(np.repeat(np.arange(groups), size))}
    names = ["sparse", "ternary", "continuous"]
    worst = {"advantages": 0.0, "loss_weights": 0.0, "metrics": 0.0}
    cases = 0
    for method in METHODS:
        spec = get_method(method)
        norms = BATCH_NORMS if "batch_norm" in spec.options else ("response",)
        for batch_norm in norms:
            for layout, index in layouts.items():
                options = EstimatorOptions(batch_norm=batch_norm,
                                           static_weights=(2.0, 1.0, 1.5) if spec.needs_static_weights else None)
                label = f"{method}, batch_norm {batch_norm}, {layout}"
                token = batch_norm == "token"
                on_cpu = compute_advantages(method, torch.as_tensor(rewards), torch.as_tensor(index), options,
                                            lengths=torch.as_tensor(lengths) if token else None, channel_names=names)
                on_device = compute_advantages(method, torch.as_tensor(rewards, device=device),
                                               torch.as_tensor(index, device=device), options,
                                               lengths=torch.as_tensor(lengths, device=device) if token else None,
                                               channel_names=names)
                cases += 1
                pairs = {"advantages": (on_cpu.advantages, on_device.advantages),
                         "loss_weights": (on_cpu.loss_weights, on_device.loss_weights)}
                if sorted(on_cpu.metrics) != sorted(on_device.metrics):
                    part.check(f"estimator {label}: metric names", False,
                               f"{sorted(set(on_cpu.metrics) ^ set(on_device.metrics))}")
                    continue
                keys = sorted(on_cpu.metrics)
                pairs["metrics"] = (torch.tensor([on_cpu.metrics[k] for k in keys], dtype=torch.float64),
                                    torch.tensor([on_device.metrics[k] for k in keys], dtype=torch.float64))
                for what, (a, b) in pairs.items():
                    difference = max_abs_difference(a, b)
                    worst[what] = max(worst[what], difference)
                    if difference > ESTIMATOR_TOLERANCE:
                        part.check(f"estimator {label}: {what}", False,
                                   f"max |diff| {difference:.3g} (tolerance {ESTIMATOR_TOLERANCE:g})")
    for what, difference in worst.items():
        part.check(f"estimators ({len(METHODS)} methods, {cases} cases): {what} on {device} = on the CPU",
                   difference <= ESTIMATOR_TOLERANCE,
                   f"largest |diff| {difference:.3g} (tolerance {ESTIMATOR_TOLERANCE:g})")


def policy_parity(part: Part, device: str, policy: Path, task_options: dict[str, Any], max_new_tokens: int) -> None:
    """The tiny policy on ``device`` against the CPU: the log-probs of the CPU's sampled responses (the trainer's
    grouped-prompt forward), the device sampler's draws for the same seed, and its log-probs against a fresh
    forward on the device."""
    import torch

    from dara.tasks import get_task
    from dara.tiny.policy import decode_responses, load_policy, rollout, token_logprobs

    group_size = 4
    tokenizer, model = load_policy(policy)
    items = get_task(TASK, **task_options).items("train", 16, seed=0)
    prompts = [item["prompt"] for item in items for _ in range(group_size)]

    def score(on, batch):
        width = int(batch["prompt_length"])
        with torch.inference_mode():
            logp, _ = token_logprobs(on, batch["input_ids"], batch["attention_mask"], start=width,
                                     prompt_group_size=group_size, scored=batch["response_mask"].bool())
        return logp

    torch.manual_seed(0)
    cpu_batch = rollout(model, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=1.0)
    cpu_logp = score(model, cpu_batch)
    on_device = copy.deepcopy(model).to(device)
    device_logp = score(on_device, {name: tensor.to(device) for name, tensor in cpu_batch.items()})
    within(part, f"tiny policy: log-probs of {len(prompts)} responses on {device} = on the CPU", cpu_logp,
           device_logp, LOGPROB_TOLERANCE)
    torch.manual_seed(0)
    device_batch = rollout(on_device, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=1.0)
    within(part, f"tiny policy: the sampler's log-probs on {device} = a fresh forward there",
           device_batch["logprobs"] * device_batch["response_mask"], score(on_device, device_batch),
           LOGPROB_TOLERANCE)
    cpu_texts, _ = decode_responses(tokenizer, cpu_batch)
    device_texts, _ = decode_responses(tokenizer, device_batch)
    same = sum(a == b for a, b in zip(cpu_texts, device_texts)) / len(prompts)
    part.check(f"tiny policy: one seed draws the same responses on {device} as on the CPU", same >= SAME_RESPONSES,
               f"{same:.0%} of {len(prompts)} rows (at least {SAME_RESPONSES:.0%})")


def tiny_trainer_parity(part: Part, device: str, experiment: dict[str, Any], policy: Path, out: Path) -> None:
    """A 2-step tiny-trainer run (the verl_cpu scale's settings, GDPO, seed 0) on ``device`` and on the CPU: it
    completes, and its step-0 rollouts (the warm start's, drawn with the same uniforms) score alike."""
    import pandas as pd

    from dara.runs import Run
    from dara.experiments import run_settings
    from dara.tiny.trainer import train

    settings = {**run_settings(experiment, f"{TASK}_trl", "gdpo"), "steps": 2, "eval_every": 1}
    runs = {}
    for where in dict.fromkeys(("cpu", device)):
        run = Run(scale="gpu_check", backend="tiny", scale_backend="verl", task=TASK, method="gdpo", group_size=4,
                  seed=0, settings=settings, results=str(out / f"tiny_trainer_{where}"))
        frame = train(run, policy=str(policy), progress=False, device=where)
        runs[where] = run
        part.check(f"tiny trainer on {where}: 2 steps, rewards finite",
                   frame["step"].tolist() == [0, 1] and bool(frame.filter(like="reward/").notna().all().all()))
    rollouts = {where: pd.read_parquet(Path(run.run_dir) / "rollouts.parquet") for where, run in runs.items()}
    first = {where: frame[frame["step"] == 0].drop(columns="advantage") for where, frame in rollouts.items()}
    same = float((first["cpu"].to_numpy() == first[device].to_numpy()).all(axis=1).mean())
    part.check(f"tiny trainer: step 0's rewards on {device} = on the CPU, response by response", same >= SAME_RESPONSES,
               f"{same:.0%} of {len(first['cpu'])} responses (at least {SAME_RESPONSES:.0%})")


def run_parity(part: Part, device: str, experiment: dict[str, Any], data_dir: Path, out: Path) -> None:
    policy = data_dir / TASK / "policy"
    task = experiment["tasks"][TASK]
    for name, check in (("estimators", lambda: estimator_parity(part, device)),
                        ("tiny policy", lambda: policy_parity(part, device, policy, task.get("options", {}),
                                                              int(task["settings"]["max_new_tokens"]))),
                        ("tiny trainer", lambda: tiny_trainer_parity(part, device, experiment, policy, out))):
        try:
            check()
        except Exception:  # one failed check must not hide the others
            import traceback

            part.fail(name, traceback.format_exc())


# --- parts 2 and 3: TRL and verl --------------------------------------------------------------------------------------

def run_trl(part: Part, device: str, runs: list, policy: Path, steps: int, out: Path, timeout: float) -> None:
    log = out / "logs" / "trl.log"
    command = [sys.executable, "-m", "dara.trl.train", "--no-progress", "--device", device, "--policy", str(policy),
               "--run", *(run.to_json() for run in runs)]
    started = time.perf_counter()
    code = _run_logged(command, log, timeout, _subprocess_env(), ROOT)
    part.notes.append(f"TRL: {len(runs)} runs in one process, {time.perf_counter() - started:.0f} s wall; log {log}")
    if code != 0:
        part.fail("python -m dara.trl.train", f"{'timed out' if code is None else f'exit status {code}'}\n"
                  + _log_tail(log))
    for run in runs:
        frame = check_run_outputs(part, run, steps, f"trl {run.method}")
        if frame is not None and len(frame) > 1:
            part.notes.append(f"trl {run.method}: median step {frame['seconds'].iloc[1:].median():.2f} s")


def run_verl(part: Part, device: str, run, steps: int, out: Path, timeout: float) -> None:
    log = out / "logs" / f"verl_{run.method}.log"
    command = [sys.executable, "-m", "dara.verl_backend.launch", "train", "--run", run.to_json()]
    started = time.perf_counter()
    code = _run_logged(command, log, timeout, _subprocess_env(), out)
    wall = time.perf_counter() - started
    label = f"verl {run.method}"
    if code != 0:
        part.fail(f"{label}: python -m dara.verl_backend.launch train",
                  f"{'timed out' if code is None else f'exit status {code}'} after {wall:.0f} s\n" + _log_tail(log))
    frame = check_run_outputs(part, run, steps, label)
    if frame is None:
        return
    diff = frame.get("verl/training/rollout_probs_diff_mean")
    bound = PROBS_DIFF_BOUND[device]
    part.check(f"{label}: rollout and actor agree (training/rollout_probs_diff_mean)",
               diff is not None and bool(diff.notna().all()) and float(diff.max()) <= bound,
               "missing" if diff is None else f"largest {float(diff.max()):.3g} (bound {bound:g})")
    grad = frame.get("verl/actor/grad_norm")
    part.check(f"{label}: gradient norms finite", grad is not None and bool(grad.notna().all())
               and bool((grad.abs() < math.inf).all()), "" if grad is None else f"largest {float(grad.max()):.3g}")
    later = frame[frame["step"] > 0]
    timing = f"{label}: {wall:.0f} s wall (Ray start-up included)"
    if not later.empty:
        timing += f"; median step {later['seconds'].median():.2f} s"
        if "verl/timing_s/gen" in later:
            timing += f", generation {later['verl/timing_s/gen'].median():.2f} s"
    part.notes.append(timing + f"; log {log}")


# --- main -------------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=DEVICES, default="cuda")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_check",
                        help="where the runs, logs and summary.md go (default results/gpu_check)")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "results" / "verl_cpu" / "data",
                        help=f"holds {TASK}/train.parquet, test.parquet and policy/ (default results/verl_cpu/data; "
                             "built under --out where missing)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                        help=f"training steps of every run (default {DEFAULT_STEPS})")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="seconds for the whole check (default 480 on cuda, 3600 on cpu): a part that would "
                             "start later is reported as not run, a job still running then is stopped")
    parser.add_argument("--verl", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra verl setting of the verl runs (YAML value), e.g. "
                             "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false; repeatable")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    steps = args.steps
    if steps < 2:
        parser.error("--steps must be at least 2 (a checkpoint half-way and one at the end)")
    deadline = started + (args.time_limit or DEFAULT_TIME_LIMIT_S[args.device])
    import yaml

    extra_verl = {}
    for item in args.verl:
        key, equals, value = item.partition("=")
        if not equals or not key:
            parser.error(f"--verl takes KEY=VALUE, got {item!r}")
        extra_verl[key] = yaml.safe_load(value)
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from dara.io import write_text_atomic

    environment: dict[str, Any] = {"device": args.device}
    parts: list[Part] = []

    def write_summary() -> None:
        environment["wall time"] = f"{time.perf_counter() - started:.0f} s"
        # atomic: a check killed mid-write (--time-limit, the machine's own limit) leaves the previous summary whole
        write_text_atomic(out / "summary.md", summary_markdown(environment, parts))

    try:
        from dara.tiny.policy import torch_device

        torch_device(args.device)
        environment["machine"] = device_description(args.device)
    except Exception as error:
        environment["machine"] = f"unusable: {error}"
        setup = Part("set-up")
        setup.fail("device", error)
        parts.append(setup)
        write_summary()
        print((out / "summary.md").read_text())
        return exit_status(parts)
    environment.update({"python": platform.python_version(), **{f"version {k}": v for k, v in versions().items()},
                        "steps per run": steps, "command": shlex.join([sys.executable, "-m", "benchmarks.gpu_check",
                                                                      *(sys.argv[1:] if argv is None else argv)]),
                        "dara's verl plugin through": "its entry point (installed dara)"
                        if plugin_entry_point_installed() else "VERL_USE_EXTERNAL_MODULES (dara not installed)"})
    print(f"gpu check on {environment['machine']}; results in {out}", flush=True)

    # 1. parity (in this process), with the data the runs start from
    part = Part("parity: estimators and the tiny policy on the device against the CPU")
    parts.append(part)
    part_started = time.perf_counter()
    data_dir = None
    try:
        try:
            data_dir = existing_data(args.data_dir.absolute(), part)
        except FileNotFoundError as missing:
            part.notes.append(f"no verl data at {args.data_dir} ({missing}): building it")
            data_dir = build_data(out, part)
        experiment = check_experiment(args.device, steps, data_dir, extra_verl)
        experiment_file = out / "experiment.yaml"
        experiment_file.write_text(yaml.safe_dump(experiment, sort_keys=False))
        from dara.experiments import load_experiment
        from dara.runs import run_matrix

        loaded = load_experiment(experiment_file)
        runs = [dataclasses.replace(run, results=str(out)) for run in run_matrix(loaded)]
        run_parity(part, args.device, loaded, data_dir, out)
    except Exception:
        import traceback

        part.fail("set-up", traceback.format_exc())
        runs = []
    part.seconds = time.perf_counter() - part_started
    write_summary()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # the jobs below share the GPU with this process

    # 2. TRL, 3. verl: jobs of their own, each given the time left
    trl_runs = [run for run in runs if run.backend == "trl"]
    verl_runs = [run for run in runs if run.backend == "verl"]
    jobs = [("trl: dara.trl on the device, " + ", ".join(TRL_METHODS),
             lambda part, left: run_trl(part, args.device, trl_runs, data_dir / TASK / "policy", steps, out, left))]
    jobs += [(f"verl: verl's training loop on the device, {run.method}",
              lambda part, left, run=run: run_verl(part, args.device, run, steps, out, left)) for run in verl_runs]
    if not runs:
        jobs = [(name, None) for name, _ in jobs] or [("trl and verl runs", None)]
    for name, job in jobs:
        part = Part(name)
        parts.append(part)
        left = deadline - time.perf_counter()
        if job is None or left < 30:
            part.ran = False
            part.notes.append("the runs could not be set up (see parity)" if job is None
                              else f"{left:.0f} s left of --time-limit")
            write_summary()
            continue
        print(f"{name} ({left:.0f} s left)", flush=True)
        part_started = time.perf_counter()
        try:
            job(part, left)
        except Exception:
            import traceback

            part.fail("run", traceback.format_exc())
        part.seconds = time.perf_counter() - part_started
        write_summary()
    print((out / "summary.md").read_text())
    return exit_status(parts)


if __name__ == "__main__":
    sys.exit(main())
