"""Paper data preparation into verl's parquet format, on fixtures the tests make."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dara.verl_backend.data import MATH_INSTRUCTION, check_verl_frame, prepare_deepscaler, prepare_rlla


def rlla_frame(n):
    return pd.DataFrame({
        "data_source": ["rlla"] * n,
        "prompt": [[{"role": "system", "content": "tools"}, {"role": "user", "content": f"q{i}"}] for i in range(n)],
        "reward_model": [{"ground_truth": "<think>x</think>\n<response>hi</response>", "style": "rule"}] * n,
        "extra_info": [{"index": i} for i in range(n)],
    })


def test_rlla_is_kept_as_it_is_and_row_counts_are_checked(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    rlla_frame(6).to_parquet(source / "train.parquet")
    rlla_frame(2).to_parquet(source / "test.parquet")
    counts = prepare_rlla(tmp_path / "out", source, expected_rows={"train": 6, "test": 2})
    assert counts == {"train": 6, "test": 2}
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    assert [m["content"] for m in train["prompt"][5]] == ["tools", "q5"]  # original order
    with pytest.raises(ValueError, match="expected 3920 rows"):
        prepare_rlla(tmp_path / "out2", source)  # the real dataset has 3920/80 rows


def test_deepscaler_becomes_user_turn_with_instruction_and_held_out_test(tmp_path):
    items = [{"problem": f"What is {i}+{i}?", "answer": str(2 * i), "solution": "..."} for i in range(30)]
    source = tmp_path / "deepscaler.json"
    source.write_text(json.dumps(items))
    counts = prepare_deepscaler(tmp_path / "out", source, test_rows=5)
    assert counts == {"train": 25, "test": 5}
    train = pd.read_parquet(tmp_path / "out" / "train.parquet")
    test = pd.read_parquet(tmp_path / "out" / "test.parquet")
    problems = {m[0]["content"].removesuffix(MATH_INSTRUCTION) for m in pd.concat([train, test])["prompt"]}
    assert problems == {item["problem"] for item in items}  # nothing lost, nothing duplicated
    first = train.iloc[0]
    assert list(first["prompt"])[0]["role"] == "user" and first["prompt"][0]["content"].endswith(MATH_INSTRUCTION)
    question = first["prompt"][0]["content"].removesuffix(MATH_INSTRUCTION)
    assert first["reward_model"]["ground_truth"] == str(2 * int(question.split()[2].split("+")[0]))
    again = tmp_path / "again"
    prepare_deepscaler(again, source, test_rows=5)
    assert pd.read_parquet(again / "test.parquet").equals(test)  # the held-out split is fixed


def test_bad_sources_are_refused(tmp_path):
    source = tmp_path / "d.jsonl"
    source.write_text(json.dumps({"question": "x", "answer": "1"}) + "\n")
    with pytest.raises(ValueError, match="problem"):
        prepare_deepscaler(tmp_path / "o", source, test_rows=0)
    with pytest.raises(ValueError, match="prompt must be a list of chat messages"):
        check_verl_frame(pd.DataFrame({"data_source": ["x"], "prompt": [["hi"]], "reward_model": [{"ground_truth": 1}],
                                       "extra_info": [{}]}), "fixture")


def test_downloading_deepscaler_without_datasets_says_what_is_missing(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)  # as in the CPU environment, where it is not installed
    with pytest.raises(ModuleNotFoundError, match="datasets"):
        prepare_deepscaler(tmp_path / "out")
