"""Train a tiny policy with TRL's ``GRPOTrainer`` and DARA: the second, independent trainer beside ``dara.tiny.trainer``.

Same command line, same experiment settings, same prompts per step (the tiny trainer's draw for the seed), same run
folder contents (``config.yaml``, ``git_revision.txt``, ``metrics.parquet`` in the tiny trainer's schema,
``checkpoints/step{s}``); only the training loop is TRL's:

    python -m dara.trl.train --experiment tiny \\
        --run-dir results/tiny/trl/runs/toolcall/dara_sym/G4/seed0 results/tiny/trl/runs/toolcall/dara_sym/G4/seed1

How the tiny trainer's settings map onto TRL (``trl_config``): one rollout step is one TRL generation batch of
``responses_per_step`` completions (``steps_per_generation = minibatches`` optimizer steps of
``responses_per_step / minibatches`` completions each, one epoch), so ``max_steps = steps * minibatches``;
``loss_type="bnpo"`` (token mean per minibatch, the tiny trainer's loss; TRL's default is ``dapo``), constant
learning rate after a linear warm-up over ``lr_warmup_updates`` optimizer steps (``constant_with_warmup``; plain
``constant`` at 0; ``cosine`` where ``lr_schedule`` says so, decaying over ``max_steps``), AdamW without weight
decay, ``epsilon = clip_ratio``, ``beta = kl_coef`` with the KL term not weighted by the importance ratio
(``use_bias_correction_kl=False``). Differences that remain are listed in
docs/trl.md.

Row ``step = s`` of ``metrics.parquet`` describes the rollouts of the policy after ``s`` rollout steps, as in the
tiny trainer, and ``checkpoints/step{s}`` is that policy: TRL numbers optimizer steps from 1 after each update
(``state.global_step``), ``minibatches`` of them per rollout, and `rollout_step` converts. Runs do not resume: a
killed run starts over.

``--device cuda`` (``train(..., device="cuda")``) trains on the GPU (TRL's ``use_cpu=False``; the GPU check,
docs/gpu_check.md), in float32 as on the CPU; TRL samples with the device's random generator there, so the responses
differ from a CPU run's. The run's config.yaml then records ``device: cuda``; a CPU run's records no device.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import SchedulerType, TrainerCallback

from dara.devices import device_config_entries, torch_device
from dara.io import replace_atomically
from dara.provenance import write_run_provenance
from dara.rewards.outcome import parse_failure_metrics
from dara.runs import cpu_checkpoint_steps
from dara.tasks import Task, get_task
from dara.tiny.policy import load_policy, policy_digest, save_policy
from dara.tiny.trainer import TrainSettings, resolved_config, train_from_command_line
from dara.advantages import METRIC_PREFIX
from dara.trl.trainer import DaraGRPOConfig, DaraGRPOTrainer

BACKEND = "trl"
LOSS_TYPE = "bnpo"  # token mean over each minibatch: the tiny trainer's policy loss


def step_prompt_indices(pool_size: int, prompts_per_step: int, steps: int, seed: int) -> np.ndarray:
    """Pool indices of each step's prompts, (steps, prompts_per_step): the tiny trainer's draw for ``seed``
    (a ``default_rng(seed)`` drawing without replacement within a step)."""
    if prompts_per_step > pool_size:
        raise ValueError(f"{prompts_per_step} prompts per step but a pool of {pool_size}")
    rng = np.random.default_rng(seed)
    return np.stack([rng.choice(pool_size, size=prompts_per_step, replace=False) for _ in range(steps)])


class TaskRewards:
    """One TRL reward function per reward of a task, named after it.

    TRL calls each function on the same batch; the task scores all rewards at once, so the first call scores the
    batch and the others read their column from that result.
    """

    def __init__(self, task: Task, pool: list[dict[str, Any]]):
        self.task, self.pool = task, pool
        self._cached_key: tuple | None = None
        self._cached: np.ndarray | None = None
        # one reward_parse_failures/<channel> dict per scored batch, i.e. per rollout step (dara.rewards.outcome)
        self.parse_failures: list[dict[str, float]] = []
        self.functions = [self._column_function(k, name) for k, name in enumerate(task.reward_names)]

    def _column_function(self, column: int, name: str):
        def reward(prompts, completions, completion_ids, item_index, **_):
            return self.score(completions, completion_ids, item_index)[:, column].tolist()

        reward.__name__ = name
        return reward

    def score(self, completions, completion_ids, item_index) -> np.ndarray:
        key = (tuple(completions), tuple(item_index))
        if key != self._cached_key:
            items = [self.pool[int(i)] for i in item_index]
            # completion_ids end with EOS when the completion finished: counted, as the tiny trainer counts it
            scored = self.task.score_outcomes(list(completions), items, [len(ids) for ids in completion_ids])
            self._cached = scored.rewards
            self.parse_failures.append(parse_failure_metrics(self.task.reward_names, scored.parse_failures))
            self._cached_key = key
        return self._cached


def trl_config(run, args: TrainSettings, output_dir: str | Path, progress: bool = True,
               device: str = "cpu") -> DaraGRPOConfig:
    """TRL's settings for a `dara.runs.Run` of a CPU trainer and its settings (`TrainSettings.of(run)`; see the
    module docstring); ``progress``: TRL's bar; ``device``: where TRL trains (`dara.devices.DEVICES`): an unknown
    device is a ValueError and "cuda" without a GPU a RuntimeError (`dara.devices.torch_device`), since with
    use_cpu=False and no GPU transformers would quietly train on the CPU."""
    use_cpu = torch_device(device).type == "cpu"
    return DaraGRPOConfig(
        output_dir=str(output_dir), seed=run.seed, data_seed=run.seed, use_cpu=use_cpu, bf16=False,
        fp16=False,
        gradient_checkpointing=False, per_device_train_batch_size=args.responses_per_step // args.minibatches,
        gradient_accumulation_steps=1, steps_per_generation=args.minibatches, num_iterations=1,
        num_generations=run.group_size, max_steps=args.steps * args.minibatches,
        max_completion_length=args.max_new_tokens, temperature=args.temperature, top_p=1.0, top_k=0,
        learning_rate=args.learning_rate, weight_decay=0.0,
        # dara.tiny.trainer.learning_rate's schedule: transformers' constant or cosine one (over max_steps, the
        # run's updates), with its linear warm-up from 0
        lr_scheduler_type=("cosine" if args.lr_schedule == "cosine"
                           else "constant_with_warmup" if args.lr_warmup_updates else "constant"),
        warmup_steps=args.lr_warmup_updates,
        # fused, as the tiny trainer's: its kernel takes the exact square root, torch.sqrt depends on the CPU
        # (dara.advantages.exact_sqrt)
        optim="adamw_torch_fused", max_grad_norm=args.max_grad_norm, epsilon=args.clip_ratio, beta=args.kl_coef,
        # the tiny trainer's (and verl's) KL loss: k3 of the current policy to the reference, not weighted by the
        # importance ratio as TRL 1.16 does by default, which changes the KL gradient even on-policy
        use_bias_correction_kl=False,
        entropy_coef=args.entropy_coef, loss_type=LOSS_TYPE, shuffle_dataset=False, logging_steps=1,
        save_strategy="no", report_to="wandb" if args.wandb else "none", disable_tqdm=not progress,
        log_completions=False, dataloader_num_workers=0, remove_unused_columns=False,
        dara_method=run.method, dara_w_max=args.w_max, dara_static_weights=args.static_weights,
        dara_batch_norm=args.batch_norm,
    )


def rollout_step(global_step: int, steps_per_generation: int) -> int:
    """The metrics row of TRL's optimizer step ``global_step`` (1-based, as ``state.global_step`` reads after the
    update): the rollout that step trained on, sampled by the first step of its generation batch from the policy
    after ``(global_step - 1) // steps_per_generation`` rollout steps."""
    if global_step < 1 or steps_per_generation < 1:
        raise ValueError(f"global_step and steps_per_generation must be >= 1, got {global_step}, "
                         f"{steps_per_generation}")
    return (global_step - 1) // steps_per_generation


class _RunRecorder(TrainerCallback):
    """Turns TRL's per-optimizer-step logs into one metrics row per rollout step; saves the checkpoints."""

    def __init__(self, rewards: TaskRewards, steps_per_generation: int, checkpoint_steps: set[int], save):
        self.rewards = rewards
        self.reward_names = list(rewards.task.reward_names)
        self.steps_per_generation = steps_per_generation
        self.checkpoint_steps = checkpoint_steps
        self.save = save
        self.logs: dict[int, list[dict[str, float]]] = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "entropy" in logs:  # a training step's log (not the final summary)
            self.logs.setdefault(rollout_step(state.global_step, self.steps_per_generation), []).append(dict(logs))

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.steps_per_generation == 0:
            done = state.global_step // self.steps_per_generation
            if done in self.checkpoint_steps:
                self.save(done)

    def rows(self) -> list[dict[str, float]]:
        return [self._row(step, self.logs[step]) for step in sorted(self.logs)]

    def _row(self, step: int, logs: list[dict[str, float]]) -> dict[str, float]:
        # Rollout metrics are logged once, at the first optimizer step after the generation; loss-side metrics
        # at every optimizer step of the rollout (averaged here; the times summed).
        first = logs[0]
        row: dict[str, float] = {"step": step}
        row.update({f"reward/{name}": first[f"rewards/{name}/mean"] for name in self.reward_names})
        row["reward/sum"] = first["reward"]  # reward_weights are refused, so TRL's "reward" is the plain sum
        row.update(self.rewards.parse_failures[step])
        row.update({key[len(METRIC_PREFIX):]: value for key, value in first.items()
                    if key.startswith(METRIC_PREFIX) and key[len(METRIC_PREFIX):] not in
                    ("loss_weight", "advantage_abs", "unscorable_fraction")})
        kl = [log["kl"] for log in logs if log.get("kl") is not None]
        row.update({
            "entropy": float(np.mean([log["entropy"] for log in logs])),
            "response_length": first["completions/mean_length"],
            "clip_fraction": float(np.mean([log["clip_ratio/region_mean"] for log in logs])),
            # TRL loads no reference model at beta = 0, so there is no KL to log then
            "kl": float(np.mean(kl)) if kl else math.nan,
            "loss_weight": first[METRIC_PREFIX + "loss_weight"],
            "advantage_abs": first[METRIC_PREFIX + "advantage_abs"],
            # the learning rate of the rollout's last optimizer update (transformers logs the one an update used)
            "learning_rate": float(logs[-1]["learning_rate"]),
            "seconds": float(sum(log["step_time"] for log in logs)),
        })
        return row


def train(run, *, policy: str | None = None, progress: bool = True, device: str = "cpu") -> pd.DataFrame:
    """One `dara.runs.Run` through TRL into its folder, from its warm-start policy (``policy``: another folder);
    returns the metrics frame (also written to metrics.parquet). ``device``: where TRL trains."""
    import trl
    import yaml
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback

    args = TrainSettings.of(run)
    policy = policy or run.policy_dir
    torch.set_num_threads(1)
    out = Path(run.run_dir)
    # before anything is written: trl_config stops the run here on an unknown or unavailable device
    config = trl_config(run, args, out / "trl", progress, device)
    (out / "checkpoints").mkdir(parents=True, exist_ok=True)
    trl_settings = {"version": trl.__version__, "loss_type": config.loss_type, "beta": config.beta,
                    "epsilon": config.epsilon, "per_device_train_batch_size": config.per_device_train_batch_size,
                    "steps_per_generation": config.steps_per_generation, "max_steps": config.max_steps,
                    "lr_scheduler_type": SchedulerType(config.lr_scheduler_type).value,
                    "warmup_steps": config.warmup_steps}
    # a CPU run records no device, as before the setting existed (the tiny trainer's rule, dara.devices)
    write_run_provenance(out, {**resolved_config(run, args), **device_config_entries(device),
                               "policy_sha256": policy_digest(policy), "policy": policy, "backend": BACKEND,
                               "trl": trl_settings})

    task = get_task(run.task, **args.task_options)
    prompts_per_step = args.responses_per_step // run.group_size
    pool = task.items("train", args.prompt_pool, seed=0)
    order = step_prompt_indices(len(pool), prompts_per_step, args.steps, run.seed).reshape(-1)
    dataset = Dataset.from_dict({"prompt": [pool[i]["prompt"] for i in order], "item_index": order.tolist()})
    tokenizer, model = load_policy(policy)
    model.train()
    rewards = TaskRewards(task, pool)

    def save(step: int) -> None:
        save_policy(model, tokenizer, out / "checkpoints" / f"step{step}")

    checkpoint_steps = set(cpu_checkpoint_steps(args.steps, args.eval_every))
    recorder = _RunRecorder(rewards, config.steps_per_generation, checkpoint_steps, save)
    trainer = DaraGRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=rewards.functions, args=config,
                              train_dataset=dataset, callbacks=[recorder])
    trainer.remove_callback(PrinterCallback)  # it prints every step's log dict to stdout
    save(0)
    started = time.perf_counter()
    trainer.train()
    rows = recorder.rows()
    if [row["step"] for row in rows] != list(range(args.steps)):
        raise RuntimeError(f"TRL logged rollout steps {[row['step'] for row in rows]}, expected 0..{args.steps - 1}")
    frame = pd.DataFrame(rows)
    replace_atomically(out / "metrics.parquet", lambda p: frame.to_parquet(p, index=False))
    if progress:
        print(f"{run.name} [trl]: {args.steps} steps in {time.perf_counter() - started:.1f} s")
    return frame


def main(argv: list[str] | None = None) -> None:
    """Train one or more runs of a ``backend: trl`` target, one after the other in one process (as the tiny
    trainer does with its seeds); the command line is the tiny trainer's."""
    train_from_command_line(__doc__.split("\n\n")[0], argv, BACKEND, train)


if __name__ == "__main__":
    main()
