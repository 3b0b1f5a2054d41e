"""A tiny task (`dara.tasks`) as a verl job: parquet data, a reward function that scores with the task's own
``score()``, and the tiny warm-started policy made loadable by verl.

    python -m dara.verl_backend.tiny_data --experiment tiny --task toolcall \\
        --policy results/tiny/policies/toolcall/warm_start0 --out results/verl_cpu/data/toolcall

writes ``train.parquet`` (``--train-items`` prompts), ``test.parquet`` (held-out prompts) and ``policy/`` (the
policy's ``save_pretrained`` folder plus a chat template). Every row carries the task item (JSON) as its ground
truth and the task's name and options in ``extra_info``, so the reward function rebuilds the very task that made it:
`compute_tiny_task_score` returns ``{"score": sum, <reward name>: value, ...}`` (the DARA trainer reads the
reward names as channels). It needs the response's token count, so runs select
``TokenCountRewardManager`` (``token_count_reward_manager: true`` in the paper settings).

verl renders prompts with the tokenizer's chat template; the tiny tokenizer has none, and the tiny prompts already
end in the assistant turn (`dara.tasks.base.ASSISTANT_TURN`), so the template writes the user message as it is.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd

from dara.io import write_parquet_atomic
from dara.verl_backend.data import check_verl_frame

# The user message, verbatim: the tiny prompt is the whole context the policy was trained on.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
DATA_SOURCE_PREFIX = "tiny_"


def task_rows(task_name: str, task_options: dict[str, Any], split: str, n_items: int, seed: int = 0) -> pd.DataFrame:
    """verl rows for ``n_items`` items of a tiny task's ``split`` (``train`` or ``heldout``)."""
    from dara.tasks import get_task

    task = get_task(task_name, **task_options)
    rows = []
    for index, item in enumerate(task.items(split, n_items, seed=seed)):
        rows.append({
            "data_source": DATA_SOURCE_PREFIX + task_name,
            "prompt": [{"role": "user", "content": item["prompt"]}],
            "ability": task_name,
            "reward_model": {"style": "rule", "ground_truth": json.dumps(item, sort_keys=True)},
            "extra_info": {"index": index, "split": split, "task": task_name,
                           "task_options": json.dumps(task_options, sort_keys=True)},
        })
    return check_verl_frame(pd.DataFrame(rows), f"{task_name} {split}")


def prepare_policy(policy: str | Path, out: str | Path) -> Path:
    """Copy a tiny policy folder to ``out`` with the chat template verl needs (written to a sibling, then moved)."""
    from transformers import PreTrainedTokenizerFast

    policy, out = Path(policy), Path(out)
    if not (policy / "config.json").is_file():
        raise FileNotFoundError(f"no tiny policy (config.json) under {policy}; run dara.tiny.warmstart first")
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(policy, tmp)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(policy)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def prepare(task_name: str, task_options: dict[str, Any], policy: str | Path, out: str | Path, *,
            train_items: int = 256, test_items: int = 16, seed: int = 0) -> dict[str, int]:
    """train/test parquet and the verl-ready policy of one tiny task under ``out``; returns the row counts."""
    out = Path(out)
    counts = {}
    for split, name, n in (("train", "train", train_items), ("heldout", "test", test_items)):
        frame = task_rows(task_name, task_options, split, n, seed=seed)
        write_parquet_atomic(frame, out / f"{name}.parquet")
        counts[name] = len(frame)
    prepare_policy(policy, out / "policy")
    return counts


def main(argv: list[str] | None = None) -> None:
    from dara.experiments import load_experiment, warm_start_settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="tiny", help="the experiment whose task options to use")
    parser.add_argument("--task", required=True)
    parser.add_argument("--policy", required=True, help="the task's warm-started tiny policy folder")
    parser.add_argument("--out", required=True)
    parser.add_argument("--train-items", type=int, default=256)
    parser.add_argument("--test-items", type=int, default=16)
    args = parser.parse_args(argv)
    options = warm_start_settings(load_experiment(args.experiment), args.task)["task_options"]
    counts = prepare(args.task, options, args.policy, args.out, train_items=args.train_items,
                     test_items=args.test_items)
    print(f"{args.task}: " + ", ".join(f"{split} {n}" for split, n in counts.items()))


if __name__ == "__main__":
    main()
