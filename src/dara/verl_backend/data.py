"""Paper-scale data in verl's parquet format (``prompt`` chat messages, ``data_source``, ``reward_model``,
``extra_info``): ToolRL's rlla_4k for tool calling and DeepScaleR for math.

    python -m dara.verl_backend.data --dataset rlla_4k    --out results/paper/data/rlla_4k
    python -m dara.verl_backend.data --dataset deepscaler --out results/paper/data/deepscaler

Both are downloaded when a network is there (rlla_4k from the ToolRL repository at its pinned commit, DeepScaleR
from the Hugging Face hub); ``--source`` reads a local copy instead (a folder holding train/test parquet files for
rlla_4k, a JSON/JSONL/parquet file with problem/answer for DeepScaleR). Outputs are written atomically.

- rlla_4k is already in verl's format: kept as it is (no filtering, original order), checked for its 3920/80 rows.
- DeepScaleR: the problem plus the study's instruction as the only (user) turn, ``ground_truth`` = answer. The
  paper's 200-item math validation file is not published; here it is 200 items held out from DeepScaleR with a
  fixed seed (docs/paper_scale.md lists this as a deviation).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from dara.io import write_atomic, write_parquet_atomic

TOOLRL_COMMIT = "8cee13ec0ca72f0461da372a93a6fd8140dbb840"
TOOLRL_URL = "https://raw.githubusercontent.com/qiancheng0/ToolRL/{commit}/dataset/rlla_4k/{split}.parquet"
RLLA_ROWS = {"train": 3920, "test": 80}
DEEPSCALER_REPO = "agentica-org/DeepScaleR-Preview-Dataset"
MATH_INSTRUCTION = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
MATH_TEST_ROWS = 200
MATH_TEST_SEED = 0
VERL_COLUMNS = ("data_source", "prompt", "reward_model", "extra_info")


def check_verl_frame(frame: pd.DataFrame, what: str, expected_rows: int | None = None) -> pd.DataFrame:
    """Raise unless ``frame`` has verl's columns, chat-message prompts and a ground truth in every row."""
    missing = [c for c in VERL_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing columns {missing} (has {list(frame.columns)})")
    if expected_rows is not None and len(frame) != expected_rows:
        raise ValueError(f"{what}: expected {expected_rows} rows, got {len(frame)}")
    for position, (prompt, reward_model) in enumerate(zip(frame["prompt"], frame["reward_model"])):
        messages = list(prompt)
        if not messages or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in messages):
            raise ValueError(f"{what}: row {position}: prompt must be a list of chat messages, got {prompt!r:.120}")
        if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
            raise ValueError(f"{what}: row {position}: reward_model lacks ground_truth")
    return frame


def _download(url: str, path: Path) -> Path:
    import urllib.request

    def fetch(handle) -> None:
        with urllib.request.urlopen(url, timeout=120) as response:
            handle.write(response.read())

    return write_atomic(path, fetch, mode="wb")


def prepare_rlla(out: str | Path, source: str | Path | None = None, expected_rows: dict | None = None) -> dict:
    """rlla_4k train/test -> ``out``/{train,test}.parquet; returns the row counts."""
    out = Path(out)
    expected_rows = RLLA_ROWS if expected_rows is None else expected_rows
    counts = {}
    for split in ("train", "test"):
        if source is None:
            raw = _download(TOOLRL_URL.format(commit=TOOLRL_COMMIT, split=split), out / "raw" / f"{split}.parquet")
        else:
            raw = Path(source) / f"{split}.parquet"
            if not raw.is_file():
                raise FileNotFoundError(f"rlla_4k source has no {split}.parquet: {raw}")
        frame = check_verl_frame(pd.read_parquet(raw), f"rlla_4k {split}", expected_rows.get(split))
        write_parquet_atomic(frame, out / f"{split}.parquet")
        counts[split] = len(frame)
    return counts


def math_rows(problems, answers, data_source: str = "deepscaler", split: str = "train") -> pd.DataFrame:
    """verl rows for math problems: the problem plus the instruction as the user turn, the answer as ground truth."""
    rows = []
    for index, (problem, answer) in enumerate(zip(problems, answers, strict=True)):
        if not isinstance(problem, str) or not problem.strip():
            raise ValueError(f"{data_source} item {index}: empty problem")
        if answer is None or not str(answer).strip():
            raise ValueError(f"{data_source} item {index}: empty answer")
        rows.append({
            "data_source": data_source,
            "prompt": [{"role": "user", "content": problem + MATH_INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(answer).strip()},
            "extra_info": {"index": index, "split": split},
        })
    return pd.DataFrame(rows)


def _read_table(source: Path) -> pd.DataFrame:
    if source.suffix == ".parquet":
        return pd.read_parquet(source)
    if source.suffix in (".jsonl", ".json"):
        try:
            return pd.read_json(source, lines=source.suffix == ".jsonl")
        except ValueError:
            return pd.read_json(source, lines=True)
    raise ValueError(f"unsupported DeepScaleR source {source} (parquet, json or jsonl)")


def prepare_deepscaler(out: str | Path, source: str | Path | None = None, test_rows: int = MATH_TEST_ROWS) -> dict:
    """DeepScaleR -> ``out``/train.parquet and a held-out ``out``/test.parquet of ``test_rows`` items."""
    out = Path(out)
    if source is None:
        try:
            import datasets
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError(
                f"downloading {DEEPSCALER_REPO} from the Hugging Face hub needs the `datasets` package, which is not "
                "in the CPU environment; install it where the data is prepared, or pass --source with a local copy"
            ) from error
        table = datasets.load_dataset(DEEPSCALER_REPO, split="train").to_pandas()
    else:
        table = _read_table(Path(source))
    for column in ("problem", "answer"):
        if column not in table.columns:
            raise ValueError(f"DeepScaleR source lacks column {column!r} (has {list(table.columns)})")
    if len(table) <= test_rows:
        raise ValueError(f"DeepScaleR source has {len(table)} items, not more than the {test_rows} held out")
    held_out = np.zeros(len(table), dtype=bool)
    held_out[np.random.default_rng(MATH_TEST_SEED).choice(len(table), size=test_rows, replace=False)] = True
    train = math_rows(table["problem"][~held_out].tolist(), table["answer"][~held_out].tolist(), split="train")
    test = math_rows(table["problem"][held_out].tolist(), table["answer"][held_out].tolist(), split="test")
    for split, frame in (("train", train), ("test", test)):
        write_parquet_atomic(check_verl_frame(frame, f"deepscaler {split}"), out / f"{split}.parquet")
    return {"train": len(train), "test": len(test)}


PREPARERS = {"rlla_4k": prepare_rlla, "deepscaler": prepare_deepscaler}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, choices=sorted(PREPARERS))
    parser.add_argument("--out", required=True)
    parser.add_argument("--source", default=None, help="a local copy instead of downloading")
    args = parser.parse_args(argv)
    counts = PREPARERS[args.dataset](args.out, args.source)
    print(f"{args.dataset}: " + ", ".join(f"{split} {n}" for split, n in counts.items()))


if __name__ == "__main__":
    main()
