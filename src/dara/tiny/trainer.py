"""Multi-reward RL for the tiny policy, one readable loop (CleanRL style).

Each step: draw ``responses_per_step / group_size`` training prompts, sample ``group_size`` responses for each,
score every reward of the task, turn the (N, K) rewards into advantages with
``dara.advantages.compute_advantages`` (the function verl calls at paper scale), and take PPO-clip updates with
GD2PO-Hard's per-response loss weights and an optional k3 KL penalty to the warm-start policy.

Row ``step = s`` of ``metrics.parquet`` describes the rollouts of the policy after ``s`` updates (row 0 is the
warm-start policy, the "step-0 rate"), and ``checkpoints/step{s}`` is that same policy. ``rollouts.parquet`` holds
every response of every step (``step``, ``group``, one column per reward named as the reward, ``response_length`` in tokens,
``advantage``): the table `dara diagnose` reads, written just before ``metrics.parquet``.

    python -m dara.tiny.trainer --experiment tiny \\
        --run-dir results/tiny/runs/toolcall/dara_sym/G8/seed0 results/tiny/runs/toolcall/dara_sym/G8/seed1

A run killed mid-way restarts from its last ``state.pt`` and, on CPU with the same seed, ends with the same
metrics as an uninterrupted run (only ``seconds`` differs). A state written with other settings, from another
warm-start policy (its ``policy_sha256``) or under another kernel dispatch (`dara.kernels.dispatch`) is not
resumed: the run starts over. A job (this command) deletes its runs' states once all of them have finished.

``--device cuda`` (``train(..., device="cuda")``) trains on the GPU instead of the CPU (the GPU check,
docs/gpu_check.md): the same random draws (the sampler's uniforms, the minibatch shuffle and every other random
number come from the CPU generators, seeded as on the CPU), other float rounding. The run's config.yaml then records
``device: cuda``; a CPU run's records no device, as before the setting existed.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dara.advantages import EstimatorOptions, compute_advantages
from dara.devices import device_config_entries, torch_device
from dara.io import replace_atomically
from dara.kernels import dispatch
from dara.methods import get_method
from dara.provenance import write_run_provenance
from dara.runs import cpu_checkpoint_steps
from dara.rewards.outcome import parse_failure_metrics
from dara.tasks import get_task
from dara.tiny.policy import decode_responses, load_policy, policy_digest, rollout, save_policy, token_logprobs


# What a resume state's minibatches were made of (`ppo_update`); a state without it came from the trainer that
# shuffled responses of different prompts together, and its run starts over.
MINIBATCH_LAYOUT = "whole prompt groups"
# Which optimiser a resume state's moments come from; a state without it came from the unfused AdamW, whose square
# root rounds otherwise (and by CPU), and its run starts over.
OPTIMIZER = "AdamW, fused"
# What a resume state records about the trainer that wrote it: key -> (this trainer's value, what an older state
# predates). A state whose value differs is not resumed: the run would mix two trainers.
STATE_MARKERS = {"minibatch_layout": (MINIBATCH_LAYOUT, "minibatches of whole prompt groups"),
                 "optimizer_kind": (OPTIMIZER, "the fused AdamW")}
# The learning rate after its warm-up (`learning_rate`): the schedules transformers (TRL) and verl share.
LR_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class TrainSettings:
    """The settings of a CPU trainer's run, typed: a view of `dara.runs.Run.settings` (`of`). The run itself (task,
    method, G, seed, folders) is the `Run`; the settings have no defaults here: their one home is the experiment
    schema (``src/dara/schemas/experiment.schema.json``), filled in by `dara.experiments.load_experiment`. Two that
    the schema leaves unset have what unset means: ``static_weights`` (none) and ``lr_schedule`` (constant)."""

    task_options: dict[str, Any]
    """keyword arguments of the task (``dara.tasks.get_task``), e.g. ``format_rate``"""
    # --- rollouts
    steps: int
    """number of updates; rollouts happen at steps 0 .. steps-1"""
    responses_per_step: int
    """responses per step (prompts per step = responses_per_step / group_size)"""
    max_new_tokens: int
    """response length cap in tokens"""
    temperature: float
    """sampling temperature of rollouts (top-p 1, no top-k, as the paper's rollouts)"""
    prompt_pool: int
    """training prompts are drawn without replacement each step from this many train items"""
    # --- advantages
    w_max: float
    """DARA's weight cap"""
    batch_norm: str
    """final normalisation: "token" (tool stack), "response" (math stack) or "none" (no batch step)"""
    # --- optimisation
    learning_rate: float
    """AdamW learning rate"""
    lr_warmup_updates: int
    """linear warm-up of the learning rate over the first this many optimizer updates (0: constant)"""
    minibatches: int
    """PPO updates per step (one epoch over the step's responses)"""
    clip_ratio: float
    """PPO clip range"""
    kl_coef: float
    """weight of the k3 KL penalty to the warm-start policy (0: not computed, the kl column is NaN)"""
    entropy_coef: float
    """entropy bonus"""
    max_grad_norm: float
    """gradient clipping"""
    # --- bookkeeping
    eval_every: int
    """save a Hugging Face checkpoint every this many steps (and at step 0 and the last)"""
    state_every: int
    """save a resume state every this many steps"""
    wandb: bool
    """also log to Weights & Biases (offline unless WANDB_MODE says otherwise; no key needed)"""
    wandb_project: str
    """wandb project name"""
    static_weights: list[float] | None = None
    """fixed channel weights of static_sym / static_asym (one per reward, each >= 1); None for the other methods"""
    lr_schedule: str = "constant"
    """the learning rate after its warm-up (`LR_SCHEDULES`): "constant", or "cosine" decay towards 0, which it would
    reach one update after the run's last"""

    @classmethod
    def of(cls, run) -> "TrainSettings":
        """The settings of a `dara.runs.Run` of a CPU trainer, checked against its method and group size."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(run.settings) - names)
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in run.settings and f.default is dataclasses.MISSING)
        if unknown or missing:
            raise ValueError(f"run {run.name}: settings {unknown} are not a CPU trainer's, {missing} are missing "
                             f"(dara.experiments.run_settings resolves them)")
        settings = cls(**run.settings)
        method = get_method(run.method)  # raises on an unknown method
        if run.group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {run.group_size}")
        if settings.responses_per_step % run.group_size:
            raise ValueError(f"responses_per_step={settings.responses_per_step} is not a multiple of "
                             f"group_size={run.group_size}")
        if min(settings.steps, settings.minibatches, settings.eval_every, settings.state_every) < 1:
            raise ValueError("steps, minibatches, eval_every and state_every must be >= 1")
        if settings.lr_warmup_updates < 0:
            raise ValueError(f"lr_warmup_updates must be >= 0, got {settings.lr_warmup_updates}")
        if settings.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {settings.lr_schedule!r}")
        if (settings.responses_per_step // run.group_size) % settings.minibatches:
            raise ValueError(f"{settings.responses_per_step // run.group_size} prompts per step "
                             f"(responses_per_step={settings.responses_per_step} / G={run.group_size}) do not split "
                             f"into minibatches={settings.minibatches} of whole prompt groups")
        if method.needs_static_weights != (settings.static_weights is not None):
            raise ValueError(f"static_weights must be set for static_sym/static_asym and only for them "
                             f"(method {run.method!r}, static_weights {settings.static_weights!r})")
        return settings

    @property
    def estimator_options(self) -> EstimatorOptions:
        return EstimatorOptions(w_max=self.w_max, batch_norm=self.batch_norm, static_weights=self.static_weights)


def resolved_config(run, settings: TrainSettings) -> dict[str, Any]:
    """What decides a CPU run's metrics, for its config.yaml and the resume check: the run's task, method, G, seed
    and warm start and its settings, the bookkeeping switches (wandb) left out."""
    values = {"task": run.task, "method": run.method, "group_size": run.group_size, "seed": run.seed,
              "warm_start": run.warm_start, **dataclasses.asdict(settings)}
    for key in ("wandb", "wandb_project"):
        values.pop(key)
    if values["lr_schedule"] == "constant":
        # left out at its default, as the experiment's settings leave it out: the runs made before the setting
        # existed keep their config and their workflow params
        values.pop("lr_schedule")
    return values


def learning_rate(update: int, args: TrainSettings) -> float:
    """The learning rate of optimizer update number ``update`` (0-based): linear warm-up from 0, then constant or a
    cosine decay, as the schedules of transformers (TRL: constant-with-warm-up, cosine-with-warm-up) and verl
    (``update / warm-up``, so update 0 only fills Adam's moments). A fresh AdamW's first updates move every weight by
    about the learning rate whatever the gradient's scale (bias correction); the warm-up keeps them from drifting the
    warm-start policy.

    The cosine decay is transformers' ``get_cosine_schedule_with_warmup`` (half a cycle, to 0) over the run's
    ``steps x minibatches`` updates: the same factor in every bit; verl's (``min_lr_ratio`` 0) writes the same
    formula as ``0.5 cos + 0.5``, equal to rounding."""
    warm_up = args.lr_warmup_updates
    if warm_up > 0 and update < warm_up:
        return args.learning_rate * (update / warm_up)
    if args.lr_schedule == "constant":
        return args.learning_rate
    progress = (update - warm_up) / max(1, args.steps * args.minibatches - warm_up)
    return args.learning_rate * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def ppo_update(model, optimizer, ref_logp, old_logp, batch, advantages, loss_weights, args: TrainSettings,
               first_update: int = 0, *, group_size: int):
    """One epoch of PPO-clip over ``args.minibatches`` shuffled minibatches of whole prompt groups; returns clip
    fraction and entropy.

    The batch's rows are its prompts' groups of ``group_size`` responses, one group after the other (as the trainer
    samples them). A minibatch holds whole groups, shuffled, so that each prompt's forward is computed once for its
    responses (`token_logprobs`, ``prompt_group_size``; verl's ``actor.use_prefix_grouper`` keeps a prompt's
    responses together for the same saving). Log-probs here are over response tokens only, (B, response width);
    ``ref_logp`` is None when ``kl_coef`` is 0. ``first_update`` numbers this epoch's first optimizer update (for the
    learning-rate schedule).
    """
    ids, attention = batch["input_ids"], batch["attention_mask"]
    width = int(batch["prompt_length"])
    # Loss mask: response tokens up to and including EOS.
    mask = batch["response_mask"].float()
    groups = ids.shape[0] // group_size
    if groups * group_size != ids.shape[0] or groups % args.minibatches:
        raise ValueError(f"{ids.shape[0]} responses in groups of {group_size} do not split into "
                         f"{args.minibatches} minibatches of whole groups")
    group_order = torch.randperm(groups)
    order = (group_order[:, None] * group_size + torch.arange(group_size)).flatten()
    clipped_tokens, entropy_sum, tokens = 0.0, 0.0, 0.0
    for update, chunk in enumerate(order.chunk(args.minibatches), start=first_update):
        m = mask[chunk]
        logp, entropy = token_logprobs(model, ids[chunk], attention[chunk], with_entropy=True, start=width,
                                       entropy_grad=args.entropy_coef != 0, prompt_group_size=group_size,
                                       scored=m.bool())
        ratio = torch.exp(logp - old_logp[chunk])
        adv = advantages[chunk, None]
        loss_unclipped = -adv * ratio
        loss_clipped = -adv * ratio.clamp(1 - args.clip_ratio, 1 + args.clip_ratio)
        # GD2PO-Hard's query weight multiplies the clipped loss; the token-mean denominator stays the full mask.
        per_token = torch.maximum(loss_unclipped, loss_clipped) * loss_weights[chunk, None]
        if ref_logp is not None:
            log_ratio_ref = ref_logp[chunk] - logp
            per_token = per_token + args.kl_coef * (torch.exp(log_ratio_ref) - log_ratio_ref - 1)
        if args.entropy_coef:
            per_token = per_token - args.entropy_coef * entropy
        loss = (per_token * m).sum() / m.sum().clamp(min=1)
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(update, args)
        optimizer.step()
        clipped_tokens += float(((loss_clipped > loss_unclipped).float() * m).sum())
        entropy_sum += float((entropy.detach() * m).sum())
        tokens += float(m.sum())
    return clipped_tokens / max(tokens, 1.0), entropy_sum / max(tokens, 1.0)


@functools.lru_cache(maxsize=8)
def _train_pool(task_name: str, options_json: str, size: int) -> tuple[dict[str, Any], ...]:
    """The training prompt pool, built once per process: the seeds of a job share it, and building 2,000 items
    costs about half a second (the items are read, never modified)."""
    return tuple(get_task(task_name, **json.loads(options_json)).items("train", size, seed=0))


def train(run, *, policy: str | None = None, progress: bool = True,
          device: str = "cpu") -> "pd.DataFrame":  # noqa: F821 - pandas lazily
    """Train one `dara.runs.Run` of the tiny backend into its folder, from its warm-start policy (``policy``: another
    folder), resuming from the folder's ``state.pt``; returns the metrics frame (also written to metrics.parquet).
    ``progress``: a tqdm bar on stderr. ``device``: where the model computes (`dara.tiny.policy.DEVICES`)."""
    import pandas as pd

    args = TrainSettings.of(run)
    on = torch_device(device)  # before anything is written: an unknown or unavailable device stops the run here
    policy = policy or run.policy_dir
    torch.set_num_threads(1)
    out = Path(run.run_dir)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    # a CPU run records no device entry, as before the setting existed (dara.devices)
    # the warm start by content as well as by path: a state from another policy at the same path is not resumed
    config = {**resolved_config(run, args), **device_config_entries(device), "policy_sha256": policy_digest(policy)}
    write_run_provenance(out, {**config, "policy": policy})

    task = get_task(run.task, **args.task_options)
    prompts_per_step = args.responses_per_step // run.group_size
    pool = _train_pool(run.task, json.dumps(args.task_options, sort_keys=True), args.prompt_pool)
    if prompts_per_step > len(pool):
        raise ValueError(f"{prompts_per_step} prompts per step but a pool of {len(pool)}")
    tokenizer, model = load_policy(policy)
    model.to(on)  # before the reference copy and the optimizer, which follow the model's parameters
    # The warm-start policy is only needed for a KL penalty; with kl_coef 0 its forward would buy nothing.
    reference = copy.deepcopy(model).eval() if args.kl_coef else None
    model.train()
    # fused: one kernel for every parameter, and on the CPU the kernel's own square root (the single-tensor and
    # foreach paths call torch.sqrt, which ATen hands to MKL's vector math: not the same bytes on every CPU, as
    # dara.advantages.exact_sqrt says)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0, fused=True)

    # Seeds first; a resume state then overwrites model, optimizer and every RNG with the saved ones.
    random.seed(run.seed)
    np.random.seed(run.seed)
    torch.manual_seed(run.seed)
    prompt_rng = np.random.default_rng(run.seed)
    rows: list[dict[str, float]] = []
    rollouts: list[dict[str, np.ndarray]] = []  # per step: every response's step, group, rewards, length, advantage
    start = 0
    state_path = out / "state.pt"
    # onto the CPU: the RNG states must be CPU tensors; load_state_dict copies the weights to the model's device
    state = torch.load(state_path, weights_only=False, map_location="cpu") if state_path.exists() else None
    kernels = dispatch()  # what this process's products round with: a state records it, a resume compares it
    if state is not None and "rollouts" not in state:
        # written before runs kept rollouts.parquet: resuming would leave its first steps out, so start over
        print(f"{state_path} predates rollouts.parquet; training this run from step 0", file=sys.stderr)
        state = None
    for key, (value, predated) in STATE_MARKERS.items():
        if state is not None and state.get(key) != value:
            # written by an earlier trainer (other minibatches, another optimiser): resuming would make one run of
            # two trainers (and two random streams), so start over
            print(f"{state_path} predates {predated}; training this run from step 0", file=sys.stderr)
            state = None
    if state is not None and state.get("dispatch") != kernels:
        # a killed run's state from another kernel dispatch (the workflow reruns a job whose pin changed): resuming
        # would train one run in two roundings, so start over
        print(f"{state_path} was written under another kernel dispatch ({state.get('dispatch')}, now {kernels}); "
              "training this run from step 0", file=sys.stderr)
        state = None
    if state is not None and state["args"] != config:
        # a killed run's state from other settings or another warm start (the workflow reruns a job whose settings
        # or policy changed): resuming would mix two runs, so start over, and say which entries differ
        changed = sorted(key for key in {*state["args"], *config} if state["args"].get(key) != config.get(key))
        print(f"{state_path} was written with other settings or another policy ({', '.join(changed)}); training "
              "this run from step 0", file=sys.stderr)
        state = None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        prompt_rng.bit_generator.state = state["prompt_rng"]
        rows, rollouts, start = state["rows"], state["rollouts"], state["step"]
        print(f"{out}: resuming from its state at step {start}", file=sys.stderr)

    wandb_run = None
    if args.wandb:
        import wandb

        os.environ.setdefault("WANDB_MODE", "offline")
        wandb_run = wandb.init(project=args.wandb_project, name=run.name, config=config, dir=str(out),
                               id=run.name, resume="allow")

    eval_steps = set(cpu_checkpoint_steps(args.steps, args.eval_every))
    from tqdm import tqdm

    bar = tqdm(range(start, args.steps + 1), desc=run.name, disable=not progress, mininterval=2)
    for step in bar:
        if step in eval_steps:
            save_policy(model, tokenizer, out / "checkpoints" / f"step{step}")
        if step % args.state_every == 0 and step > start:
            state = {"args": config, "dispatch": kernels, "step": step, "rows": rows, "rollouts": rollouts,
                     **{key: value for key, (value, _) in STATE_MARKERS.items()},
                     "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                     "numpy_rng": np.random.get_state(), "python_rng": random.getstate(),
                     "prompt_rng": prompt_rng.bit_generator.state}
            replace_atomically(state_path, lambda p: torch.save(state, p))
        if step == args.steps:
            break
        started = time.perf_counter()

        # 1. Rollouts: G responses for each of this step's prompts.
        chosen = prompt_rng.choice(len(pool), size=prompts_per_step, replace=False)
        items = [pool[i] for i in chosen for _ in range(run.group_size)]
        batch = rollout(model, tokenizer, [item["prompt"] for item in items], max_new_tokens=args.max_new_tokens,
                        temperature=args.temperature)
        texts, lengths = decode_responses(tokenizer, batch)

        # 2. Rewards, one column per reward, and the method's advantages.
        scored = task.score_outcomes(texts, items, lengths)
        rewards = scored.rewards
        groups = np.repeat(np.arange(prompts_per_step), run.group_size)
        result = compute_advantages(run.method, rewards, groups, args.estimator_options,
                                    lengths=lengths if args.batch_norm == "token" else None,
                                    channel_names=task.reward_names)

        # 3. PPO-clip update against the sampling policy's log-probs: the sampler's own, which a fresh forward of
        # the same weights reproduces to float rounding (tested), so no second pass. KL to the warm-start policy
        # (k3, response tokens) only when it is penalised; otherwise the column is NaN.
        old_logp = batch["logprobs"]
        kl = float("nan")
        ref_logp = None
        if reference is not None:
            # inference mode, as the sampler: about 5 % off this forward, bit for bit; then an ordinary copy, a guard:
            # today's KL term saves no input for backward, but an inference tensor saved by a later term would fail
            with torch.inference_mode():
                ref_logp, _ = token_logprobs(reference, batch["input_ids"], batch["attention_mask"],
                                             start=int(batch["prompt_length"]), prompt_group_size=run.group_size,
                                             scored=batch["response_mask"].bool())
            ref_logp = ref_logp.clone()
            response_mask = batch["response_mask"].float()
            log_ratio = ref_logp - old_logp
            kl = float(((torch.exp(log_ratio) - log_ratio - 1) * response_mask).sum() / response_mask.sum())
        clip_fraction, entropy = ppo_update(model, optimizer, ref_logp, old_logp, batch, result.advantages.to(on),
                                            result.loss_weights.to(on), args, first_update=step * args.minibatches,
                                            group_size=run.group_size)

        row = {"step": step}
        row.update({f"reward/{name}": float(rewards[:, k].mean()) for k, name in enumerate(task.reward_names)})
        row["reward/sum"] = float(rewards.sum(axis=1).mean())
        row.update(parse_failure_metrics(task.reward_names, scored.parse_failures))
        row.update(result.metrics)
        row.update({"entropy": entropy, "response_length": float(np.mean(lengths)), "clip_fraction": clip_fraction,
                    "kl": kl, "loss_weight": float(result.loss_weights.mean()),
                    "advantage_abs": float(result.advantages.abs().mean()),
                    # the learning rate of the step's last optimizer update (its warm-up, lr_warmup_updates)
                    "learning_rate": float(optimizer.param_groups[0]["lr"]),
                    "seconds": time.perf_counter() - started})
        rows.append(row)
        rollouts.append({"step": np.full(len(texts), step), "group": groups,
                         **{name: rewards[:, k] for k, name in enumerate(task.reward_names)},
                         "response_length": np.asarray(lengths), "advantage": result.advantages.numpy()})
        if wandb_run is not None:
            wandb_run.log(row, step=step)
        bar.set_postfix({name: f"{row[f'reward/{name}']:.2f}" for name in task.reward_names}, refresh=False)

    if wandb_run is not None:
        wandb_run.finish()
    responses = pd.concat([pd.DataFrame(part) for part in rollouts], ignore_index=True)
    replace_atomically(out / "rollouts.parquet", lambda p: responses.to_parquet(p, index=False))
    frame = pd.DataFrame(rows)
    # metrics.parquet is the rule's output: written last, atomically.
    replace_atomically(out / "metrics.parquet", lambda p: frame.to_parquet(p, index=False))
    return frame


def train_from_command_line(description: str, argv, backend: str, train_run) -> None:
    """The command line of every CPU trainer: the runs (``--run JSON ...`` as the workflow passes them, or
    ``--experiment X --run-dir ...``; `dara.runs.add_run_arguments`), ``--policy``, ``--no-progress``,
    ``--device``; trains each run of ``backend`` with ``train_run(run, policy=..., progress=..., device=...)``, one
    after the other, into its folder."""
    from dara.runs import add_run_arguments, runs_from_arguments
    from dara.tiny.policy import DEVICES

    parser = argparse.ArgumentParser(description=description)
    add_run_arguments(parser)
    parser.add_argument("--policy", default=None, help="warm-start folder (default: the run's, dara.runs.policy_dir, "
                                                       "in the results tree of a --run-dir typed with a prefix)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--device", choices=DEVICES, default="cpu",
                        help="where the model computes (default cpu; cuda: the current GPU)")
    cli = parser.parse_args(argv)
    runs = runs_from_arguments(cli, parser)
    for run in runs:
        if run.backend != backend:
            parser.error(f"{run.run_dir} is a run of the {run.backend!r} backend, not of {backend!r}")
    for run in runs:
        train_run(run, policy=cli.policy, progress=not cli.no_progress, device=cli.device)
    # A resume state is for a killed job. Snakemake retries a killed job whole, deleting the metrics its finished
    # runs had written, so those keep their state until the job's last run has finished: they resume from it.
    for run in runs:
        (Path(run.run_dir) / "state.pt").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    """Train one or more runs in one process: importing torch and transformers costs seconds, more than a tiny
    run's training, so a job trains the seeds of a (task, method, G) one after the other. Each run is seeded on
    its own, so it ends exactly as it would alone."""
    train_from_command_line(__doc__.split("\n\n")[0], argv, "tiny", train)


if __name__ == "__main__":
    main()
