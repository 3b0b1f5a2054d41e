"""Warm start of a task's tiny policy: tokenizer, model, supervised fine-tuning, step-0 reward rates.

    python -m dara.tiny.warmstart --experiment tiny --task toolcall --warm-start 0 --out results/tiny/policies/toolcall/warm_start0

1. Train a byte-level BPE tokenizer on prompts + demonstrations of the task's train split.
2. Build a Qwen2-architecture model (sizes from the experiment's ``warm_start.model``) and fine-tune it on
   demonstrations (loss on response tokens only). Demonstrations are redrawn every batch, so the policy learns the
   *rates* at which they satisfy each reward (the near-miss format, the padded answers).
3. Measure the step-0 rates the RL runs start from: ``probe_prompts`` train prompts x ``probe_group_size``
   samples at temperature 1, the mean of every reward and its active-group density; written to
   ``warmstart.json`` beside the ``save_pretrained`` model and tokenizer.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dara.io import write_json_atomic
from dara.provenance import git_revision, machine_record
from dara.tasks import Task, get_task
from dara.tiny.policy import EOS, build_model, decode_responses, rollout, save_policy, token_logprobs, train_tokenizer


def supervised_batch(tokenizer, task: Task, items: list[dict[str, Any]], rng: np.random.Generator,
                     prompt_ids: Mapping[str, list[int]] | None = None):
    """Left-padded prompt+demonstration ids, attention mask and a loss mask on demonstration tokens.

    ``prompt_ids`` maps prompts to their token ids: the warm start tokenizes its corpus's prompts once instead of
    every batch (demonstrations are redrawn, so they are tokenized per batch, in one call)."""
    texts = [item["prompt"] for item in items]
    prompts = ([prompt_ids[text] for text in texts] if prompt_ids is not None
               else tokenizer(texts, add_special_tokens=False)["input_ids"])
    answers = tokenizer([task.demonstration(item, rng) + EOS for item in items], add_special_tokens=False)["input_ids"]
    width = max(len(p) + len(a) for p, a in zip(prompts, answers))
    # filled in numpy, then shared with torch: the same values as filling torch tensors row by row, without a
    # torch call per row (a few per cent of a supervised step)
    ids = np.full((len(items), width), tokenizer.pad_token_id, dtype=np.int64)
    attention = np.zeros_like(ids)
    loss_mask = np.zeros(ids.shape, dtype=np.float32)
    for row, (p, a) in enumerate(zip(prompts, answers)):
        start = width - len(p) - len(a)
        ids[row, start:] = p + a
        attention[row, start:] = 1
        loss_mask[row, width - len(a):] = 1.0
    return torch.from_numpy(ids), torch.from_numpy(attention), torch.from_numpy(loss_mask)[:, 1:]


def sft_loss(policy, ids: torch.Tensor, attention: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood of the answer tokens (``loss_mask``, aligned with ``ids[:, 1:]``).

    Only the answer positions go through the LM head and softmax (`token_logprobs`'s ``scored``): the same loss
    as scoring every position, without the prompts' share of that work."""
    logp, _ = token_logprobs(policy, ids, attention, scored=loss_mask.bool())
    return -(logp * loss_mask).sum() / loss_mask.sum()


def sft_optimizer(parameters, learning_rate: float) -> torch.optim.Optimizer:
    """The warm start's optimiser: AdamW without weight decay, fused as the trainer's (`dara.tiny.trainer.train`
    says why); benchmarks/bench_trainer.py times a supervised step with it."""
    return torch.optim.AdamW(parameters, lr=learning_rate, weight_decay=0.0, fused=True)


def step0_rates(model, tokenizer, task: Task, items: list[dict[str, Any]], group_size: int,
                max_new_tokens: int, seed: int) -> dict[str, float]:
    """Mean of each reward and the fraction of groups where it varies, sampling at temperature 1."""
    torch.manual_seed(seed)
    repeated = [item for item in items for _ in range(group_size)]
    batch = rollout(model, tokenizer, [item["prompt"] for item in repeated], max_new_tokens=max_new_tokens)
    texts, lengths = decode_responses(tokenizer, batch)
    rewards = task.score(texts, repeated, lengths).reshape(len(items), group_size, -1)
    rates: dict[str, float] = {"response_length": float(np.mean(lengths))}
    for k, name in enumerate(task.reward_names):
        rates[f"reward/{name}"] = float(rewards[:, :, k].mean())
        rates[f"density/{name}"] = float((rewards[:, :, k].std(axis=1) > 0).mean())
    rates["example_response"] = texts[0]
    return rates


def warm_start(task_name: str, task_options: dict[str, Any], out: str | Path, *, seed: int, vocab_size: int,
               model: dict[str, int], corpus_items: int, sft_steps: int, sft_batch_size: int,
               sft_learning_rate: float, probe_prompts: int, probe_group_size: int,
               max_new_tokens: int, matmul: str = "torch", attention: str = "sdpa") -> dict[str, Any]:
    """Build, fine-tune and save the warm-start policy of ``task_name`` under ``out``; returns warmstart.json.

    The arguments are an experiment's resolved warm-start settings (`dara.experiments.warm_start_settings`; their
    defaults live in the experiment schema). ``matmul`` (the library of the linear layers) and ``attention`` (what
    computes attention), `dara.tiny.gemm`, are saved with the policy, so every run and evaluation from it computes the
    same way."""
    torch.set_num_threads(1)
    # the CPU and the kernels this process dispatches to, for warmstart.json; a job that must run pinned and is not
    # stops here (dara.kernels.enforce_pin)
    machine = machine_record()
    torch.manual_seed(seed)
    started = time.perf_counter()
    task = get_task(task_name, **task_options)
    rng = np.random.default_rng([seed, 1])
    items = task.items("train", corpus_items, seed=seed)
    tokenizer = train_tokenizer(task.corpus(corpus_items, seed=seed), vocab_size)
    policy = build_model(len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         matmul=matmul, attention=attention, **model)
    optimizer = sft_optimizer(policy.parameters(), sft_learning_rate)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=sft_learning_rate, total_steps=sft_steps,
                                                   pct_start=0.1)
    policy.train()
    prompts = [item["prompt"] for item in items]
    prompt_ids = dict(zip(prompts, tokenizer(prompts, add_special_tokens=False)["input_ids"]))
    losses = []
    for _ in range(sft_steps):
        chosen = rng.choice(len(items), size=sft_batch_size, replace=False)
        ids, mask, loss_mask = supervised_batch(tokenizer, task, [items[i] for i in chosen], rng, prompt_ids)
        loss = sft_loss(policy, ids, mask, loss_mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    policy.eval()
    probe = task.items("train", probe_prompts, seed=seed + 1000)
    report = {
        "task": task_name,
        "task_options": task_options,
        "parameters": sum(p.numel() for p in policy.parameters()),
        "vocab_size": len(tokenizer),
        "sft_steps": sft_steps,
        "sft_final_loss": float(np.mean(losses[-20:])),
        "step0": step0_rates(policy, tokenizer, task, probe, probe_group_size, max_new_tokens, seed),
        "seconds": time.perf_counter() - started,
    }
    out = Path(out)
    save_policy(policy, tokenizer, out)
    # warmstart.json is the rule's output: written last, atomically, with the code revision that made the policy
    # and the machine it ran on.
    report["git_revision"] = git_revision()
    report["machine"] = machine
    write_json_atomic(out / "warmstart.json", report)
    return report


def main(argv: list[str] | None = None) -> None:
    from dara.experiments import load_experiment, warm_start_settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", required=True, help="scale name (tiny, smoke) or path to an experiment yaml")
    parser.add_argument("--task", required=True)
    parser.add_argument("--warm-start", type=int, default=0, metavar="K",
                        help="which of the task's warm starts (drawn with the warm_start seed + K; default 0)")
    parser.add_argument("--out", required=True)
    cli = parser.parse_args(argv)
    report = warm_start(out=cli.out, **warm_start_settings(load_experiment(cli.experiment), cli.task, cli.warm_start))
    print(json.dumps(report["step0"], indent=2))


if __name__ == "__main__":
    main()
