"""BFCL-v4 evaluation: ToolRL decoding, the paper's aggregation, and bfcl-eval's checkers on the wheel's data.

The checker tests run the real CLIs in the .venv-bfcl environment (`make setup` builds it) on a
deterministic sample of each category; they are skipped, with the reason, where that environment is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dara.evaluation import bfcl_aggregate as agg
from dara.evaluation.toolrl_format import case_format, decode_calls, format_score, qwen_completion_prompt
from dara.rewards.toolrl import render_answer

REPO = Path(__file__).resolve().parents[1]
BFCL_PYTHON = REPO / ".venv-bfcl" / "bin" / "python"
needs_bfcl_env = pytest.mark.skipif(not BFCL_PYTHON.exists(), reason="no .venv-bfcl (build it with `make setup`)")


# ---------------------------------------------------------------- plain Python


def test_decode_reads_last_block_skips_none_and_bad_lines():
    text = (
        '<think>x</think>\n<tool_call>\n{"name": "old", "parameters": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "a", "parameters": {"x": 1}}\nnot json\n{"name": "None", "parameters": {}}\n'
        '{"name": "b", "arguments": {"y": "z"}}\n["list"]\n</tool_call>'
    )
    assert decode_calls(text) == [{"name": "a", "parameters": {"x": 1}}, {"name": "b", "parameters": {"y": "z"}}]
    assert decode_calls("<think>x</think>\n<response>hi</response>") == []


def test_format_score_accepts_any_of_the_three_templates():
    call = [{"name": "f", "parameters": {}}]
    assert format_score(render_answer("t", call)) == 1.0
    assert format_score(render_answer("t", response="r")) == 1.0
    assert format_score(render_answer("t", call, response="r")) == 1.0
    assert format_score("no tags at all") == 0.0
    assert format_score('<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>') == 0.0  # no think
    assert case_format([render_answer("t", response="r"), "junk", "junk", render_answer("t", call)]) == 0.5
    assert case_format([]) == 0.0


def test_prompt_lists_tools_and_marks_turns():
    functions = [{"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}}}]
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>a</think>"},
                {"role": "tool", "name": "f(x=1)", "content": "ok"}]  # fmt: skip
    prompt = qwen_completion_prompt(messages, functions, multi_turn=True)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")
    assert '1. Name: f\nDescription: d\nParameters: {"x": {"type": "integer"}}' in prompt
    assert "<user> hi\nUse the one or more necessary tool calls" in prompt
    assert "<obs> You have made the tool call f(x=1). Execution returns: ok </obs>" in prompt
    with pytest.raises(ValueError, match="role"):
        qwen_completion_prompt([{"role": "robot", "content": "x"}], functions, multi_turn=False)


def test_category_of_reads_bfcl_id_forms():
    assert agg.category_of("simple_python_12") == "simple_python"
    assert agg.category_of("live_parallel_multiple_3-1-0") == "live_parallel_multiple"
    assert agg.category_of("multi_turn_long_context_199") == "multi_turn_long_context"
    with pytest.raises(ValueError, match="BFCL case id"):
        agg.category_of("simple_python")


SCRATCH_SCRIPT = """
from pathlib import Path
from dara.evaluation.bfcl_data import set_scratch_root
root = Path(set_scratch_root())
(root / "result").mkdir()
(root / "result" / "written_by_bfcl.json").write_text("{}")  # as bfcl-eval fills its folders
print(root)
"""


def _scratch_root_after_exit(tmp_path: Path, **environment: str) -> Path:
    env = {key: value for key, value in os.environ.items() if key != "BFCL_PROJECT_ROOT"}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(REPO / "src"), **environment)
    result = subprocess.run([sys.executable, "-c", SCRATCH_SCRIPT], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return Path(result.stdout.strip())


def test_scratch_root_made_for_bfcl_eval_is_removed_at_exit(tmp_path):
    root = _scratch_root_after_exit(tmp_path)
    assert root.parent == tmp_path and root.name.startswith("bfcl-root-")
    assert not root.exists() and list(tmp_path.iterdir()) == []


def test_scratch_root_chosen_by_the_caller_is_kept(tmp_path):
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    root = _scratch_root_after_exit(tmp_path, BFCL_PROJECT_ROOT=str(chosen))
    assert root == chosen and (chosen / "result" / "written_by_bfcl.json").exists()


def _cases(category, valid, fmt):
    return [{"id": f"{category}_{i}", "category": category, "valid": v, "format": f} for i, (v, f) in enumerate(zip(valid, fmt))]


def test_aggregation_matches_hand_computation():
    cases = []
    # Non-Live: simple python 1/2, java 1/1, js 0/1 -> Simple = (0.5 + 1 + 0) / 3 = 0.5;
    # multiple 1, parallel 0, parallel_multiple 0.5 -> Non-Live = (0.5 + 1 + 0 + 0.5) / 4 = 0.5
    cases += _cases("simple_python", [True, False], [1, 1])
    cases += _cases("simple_java", [True], [1])
    cases += _cases("simple_javascript", [False], [0])
    cases += _cases("multiple", [True], [1])
    cases += _cases("parallel", [False], [1])
    cases += _cases("parallel_multiple", [True, False], [0.5, 0.5])
    # Live, case-weighted: 3 of (1 + 4 + 1 + 2) = 8 cases valid -> 0.375; the unweighted mean of the category
    # means would be (1 + 0.25 + 0 + 0.5) / 4 = 0.4375. Format: weighted 3/8, unweighted (1 + 0 + 1 + 0.5) / 4.
    cases += _cases("live_simple", [True], [1])
    cases += _cases("live_multiple", [True, False, False, False], [0, 0, 0, 0])
    cases += _cases("live_parallel", [False], [1])
    cases += _cases("live_parallel_multiple", [True, False], [1, 0])
    # Multi-Turn: mean of (1, 0, 0.5, 0.5) = 0.5
    cases += _cases("multi_turn_base", [True], [0.25])
    cases += _cases("multi_turn_miss_func", [False], [0.75])
    cases += _cases("multi_turn_miss_param", [True, False], [1, 1])
    cases += _cases("multi_turn_long_context", [False, True], [0, 0])
    per_category = agg.category_means(cases)
    assert per_category["live_multiple"] == {"n": 4, "accuracy": 0.25, "format": 0.0}
    groups = agg.aggregate(per_category)
    assert groups["non_live_accuracy"] == pytest.approx(0.5)
    assert groups["live_accuracy"] == pytest.approx(3 / 8)
    assert groups["multi_turn_accuracy"] == pytest.approx(0.5)
    assert groups["average_accuracy"] == pytest.approx((0.5 + 3 / 8 + 0.5) / 3)
    # Format: Simple = (1 + 1 + 0)/3, Non-Live = (2/3 + 1 + 1 + 0.5)/4; Live = 3/8; Multi-Turn = (0.25+0.75+1+0)/4
    assert groups["non_live_format"] == pytest.approx((2 / 3 + 1 + 1 + 0.5) / 4)
    assert groups["live_format"] == pytest.approx(3 / 8)
    assert groups["multi_turn_format"] == pytest.approx(0.5)
    assert "average_length" not in groups  # no case carries a length score
    with_length = agg.aggregate(agg.category_means([{**case, "length": 1.0 - case["format"]} for case in cases]))
    assert with_length["live_length"] == pytest.approx(5 / 8)


def test_aggregation_refuses_missing_categories_and_bad_records():
    per_category = agg.category_means(_cases("simple_python", [True], [1]))
    with pytest.raises(ValueError, match="categories missing"):
        agg.aggregate(per_category)
    with pytest.raises(ValueError, match="outside"):
        agg.category_means(_cases("multiple", [True], [2.0]))
    with pytest.raises(ValueError, match="lacks"):
        agg.category_means([{"id": "x_1", "category": "multiple", "valid": True}])


# ---------------------------------------------------------------- bfcl-eval in its environment


def _run_bfcl(module: str, *args: str) -> None:
    """``module`` (a dotted name of the package, or the path of a script) in the bfcl environment."""
    target = [module] if module.endswith(".py") else ["-m", module]
    result = subprocess.run([str(BFCL_PYTHON), *target, *args], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]


# the ground truth in ToolRL's format: the tests' own tool (no part of the package), run as a script
REFERENCE_SCRIPT = str(Path(__file__).with_name("bfcl_reference.py"))


def _reference_and_scores(tmp_path: Path, perturb: str, categories: list[str], per_category: int):
    outputs, scores = tmp_path / f"{perturb}_outputs.json", tmp_path / f"{perturb}_scores.json"
    _run_bfcl(REFERENCE_SCRIPT, "--out", str(outputs), "--perturb", perturb,
              "--per-category", str(per_category), "--categories", *categories)  # fmt: skip
    _run_bfcl("dara.evaluation.bfcl_score", "--outputs", str(outputs), "--out", str(scores))
    return json.loads(outputs.read_text())["cases"], json.loads(scores.read_text())


@needs_bfcl_env
def test_ground_truth_in_toolrl_format_scores_full_marks(tmp_path):
    _, scores = _reference_and_scores(tmp_path, "none", list(agg.PAPER_CATEGORIES), per_category=4)
    per_category = scores["categories"]
    assert set(per_category) == set(agg.PAPER_CATEGORIES)
    for category, result in per_category.items():
        assert result["format"] == 1.0, category
        assert result["length"] == 1.0, category  # the reference answers think in 8 words
        # 2 of the 100 Java answers mix types in an untyped list, which bfcl-eval's Java parser cannot read back
        assert result["accuracy"] >= (0.75 if category == "simple_java" else 1.0), (category, result)
    groups = scores["metrics"]
    assert groups["live_accuracy"] == 1.0 and groups["multi_turn_accuracy"] == 1.0
    assert groups["non_live_accuracy"] >= 0.95
    assert groups["average_format"] == 1.0 and groups["average_length"] == 1.0


PERTURBED_CATEGORIES = ["simple_python", "parallel", "live_multiple", "multi_turn_base"]


@needs_bfcl_env
@pytest.mark.parametrize("perturb", ["wrong_value", "wrong_name", "drop_call"])
def test_perturbed_answers_fail_where_perturbed(tmp_path, perturb):
    reference, scores = _reference_and_scores(tmp_path, perturb, PERTURBED_CATEGORIES, per_category=4)
    perturbed = {case["id"]: case["perturbed"] for case in reference}
    for case in scores["cases"]:
        if case["category"].startswith("multi_turn"):
            continue
        # bfcl's AST checker compares names and values: every perturbed single-turn answer fails
        assert case["valid"] == (not perturbed[case["id"]]), case
        assert case["format"] == 1.0  # perturbations keep the ToolRL format
    multi_turn = scores["categories"]["multi_turn_base"]["accuracy"]
    # The multi-turn checker compares execution state and results, not arguments: a changed value that leaves
    # both unchanged still passes, so only most perturbed trajectories fail.
    assert multi_turn <= (0.25 if perturb == "wrong_value" else 0.0)


@needs_bfcl_env
def test_empty_outputs_score_zero(tmp_path):
    _, scores = _reference_and_scores(tmp_path, "empty", PERTURBED_CATEGORIES, per_category=3)
    assert all(not case["valid"] and case["format"] == 0.0 for case in scores["cases"])
    assert {result["accuracy"] for result in scores["categories"].values()} == {0.0}


@needs_bfcl_env
def test_custom_entries_score_with_the_ast_checker(tmp_path):
    function = {"name": "get_weather", "description": "Weather for a city.",
                "parameters": {"type": "dict", "properties": {"city": {"type": "string", "description": "City"},
                                                              "days": {"type": "integer", "description": "Days"}},
                               "required": ["city"]}}  # fmt: skip
    truth = [{"get_weather": {"city": ["Paris", "paris"], "days": ["", 1]}}]
    right = render_answer("t", [{"name": "get_weather", "parameters": {"city": "Paris"}}])
    wrong = render_answer("t", [{"name": "get_weather", "parameters": {"city": "Rome", "days": 1}}])
    cases = [{"id": f"tiny_{i}", "category": "simple", "function": [function], "ground_truth": truth, "outputs": out}
             for i, out in enumerate([right, wrong, "<response>no think</response>"])]  # fmt: skip
    (tmp_path / "in.json").write_text(json.dumps({"cases": cases}))
    _run_bfcl("dara.evaluation.bfcl_score", "--outputs", str(tmp_path / "in.json"), "--out", str(tmp_path / "out.json"))
    scored = json.loads((tmp_path / "out.json").read_text())
    assert [c["valid"] for c in scored["cases"]] == [True, False, False]
    assert [c["format"] for c in scored["cases"]] == [1.0, 1.0, 0.0]
    assert scored["metrics"] is None  # not the paper's categories: no group aggregate


@needs_bfcl_env
def test_score_cli_rejects_bad_input(tmp_path):
    def score(cases):
        (tmp_path / "in.json").write_text(json.dumps({"cases": cases}))
        return subprocess.run(
            [str(BFCL_PYTHON), "-m", "dara.evaluation.bfcl_score", "--outputs", str(tmp_path / "in.json"), "--out", str(tmp_path / "o.json")],
            capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip

    result = score([{"id": "irrelevance_0", "outputs": ""}])
    assert result.returncode != 0 and "not scored" in result.stderr
    assert not (tmp_path / "o.json").exists()
    # ids name the verdicts the caller reads back: a repeated one is refused, naming it (and only it)
    result = score([{"id": case_id, "outputs": ""} for case_id in ("irrelevance_1", "irrelevance_2", "irrelevance_1")])
    assert result.returncode != 0 and "duplicate case ids: ['irrelevance_1']" in result.stderr
    assert not (tmp_path / "o.json").exists()


class _FakeCompletions:
    """A loopback OpenAI-compatible /v1/completions endpoint answering every prompt with one fixed text."""

    def __init__(self, text: str):
        import http.server
        import threading

        self.prompts: list[dict] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.prompts.append(body)
                reply = json.dumps({
                    "id": "x", "object": "text_completion", "created": 0, "model": body["model"],
                    "choices": [{"text": text, "index": 0, "finish_reason": "stop", "logprobs": None}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()


@needs_bfcl_env
def test_generation_runs_bfcl_inference_loop_through_the_toolrl_handler(tmp_path):
    answer = render_answer("no tool fits", response="I cannot help with that.")
    server = _FakeCompletions(answer)
    try:
        out = tmp_path / "outputs.json"
        _run_bfcl("dara.evaluation.bfcl_generate", "--checkpoint", "/ckpt/step100", "--base-url", server.url,
                  "--out", str(out), "--per-category", "2", "--workers", "2",
                  "--categories", "simple_python", "multi_turn_base")  # fmt: skip
    finally:
        server.close()
    cases = {case["id"]: case["outputs"] for case in json.loads(out.read_text())["cases"]}
    assert len(cases) == 4
    request = server.prompts[0]
    assert request["model"] == "/ckpt/step100" and request["temperature"] == 0.6 and request["top_p"] == 0.95
    assert request["seed"] == 0 and request["max_tokens"] == 8192
    assert request["prompt"].startswith("<|im_start|>system\nYou are a helpful multi-turn dialogue assistant")
    assert "**Dialogue Records History**\n<user> " in request["prompt"]
    single = [v for k, v in cases.items() if k.startswith("simple_python")]
    assert single == [answer, answer]
    # a response without calls ends each turn after one step, so every turn holds exactly that output
    for case_id, turns in cases.items():
        if case_id.startswith("multi_turn"):
            assert turns and all(turn == [answer] for turn in turns)
    scores = tmp_path / "scores.json"
    _run_bfcl("dara.evaluation.bfcl_score", "--outputs", str(out), "--out", str(scores))
    scored = json.loads(scores.read_text())["cases"]
    assert all(case["format"] == 1.0 and not case["valid"] for case in scored)


def test_generation_resumes_after_a_kill_that_cut_the_last_line(tmp_path):
    from dara.evaluation.bfcl_generate import load_finished_cases

    partial = tmp_path / "outputs.json.partial.jsonl"
    assert load_finished_cases(partial) == {}
    whole = json.dumps({"id": "simple_python_0", "outputs": "a"}) + "\n"
    partial.write_text(whole + '{"id": "simple_python_1", "outp')  # killed mid-append
    assert load_finished_cases(partial) == {"simple_python_0": "a"}
    assert partial.read_text() == whole  # the cut line is gone, so the rerun appends after a whole line
    partial.write_text("not json\n" + whole)
    with pytest.raises(ValueError, match="partial.jsonl:1"):
        load_finished_cases(partial)
