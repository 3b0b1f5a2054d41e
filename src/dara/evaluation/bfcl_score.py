"""Score BFCL outputs with bfcl-eval's own checkers (run in the .venv-bfcl environment, in a subprocess).

    .venv-bfcl/bin/python -m dara.evaluation.bfcl_score --outputs outputs.json --out scores.json

`outputs.json`: `{"cases": [...]}` where a case is either a BFCL-v4 test entry from the wheel,
`{"id": "simple_python_3", "outputs": "<one assistant output>"}` or, for multi-turn entries,
`{"id": "multi_turn_base_0", "outputs": [[step outputs of turn 0], [turn 1], ...]}`; or a custom
single-turn entry (tiny scale) carrying its own docs and answers:
`{"id": ..., "category": "simple"|"multiple"|"parallel"|"parallel_multiple"|"irrelevance",
"function": [...], "ground_truth": [{name: {param: [accepted values]}}] (irrelevance: []), "outputs": "..."}`.

`scores.json`: `metrics`, the paper's group aggregates (`<non_live|live|multi_turn|average>_<accuracy|
format|length>`, fractions) when all 14 categories are present, else null; per category n / accuracy /
format / length; per case `valid` (bfcl-eval's verdict), `format` (the paper's Format metric, docs/evaluation.md), `length`
(think block of at most 16 words, the three-reward study's Length) and `error_type`. The multi-turn checker `eval`s decoded calls against simulated APIs by design, which is why
this runs as its own process.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from dara.evaluation.bfcl_aggregate import PAPER_CATEGORIES, aggregate, category_means, category_of
from dara.evaluation.bfcl_data import load_entries, load_possible_answers, set_scratch_root
from dara.io import write_json_atomic
from dara.evaluation.toolrl_format import case_format, case_think_length

# Custom (tiny-scale) entries: the AST categories, and "irrelevance" (no listed tool fits: valid iff no call).
CUSTOM_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "irrelevance")


def _flatten_outputs(outputs) -> list[str]:
    if isinstance(outputs, str):
        return [outputs]
    return [step for turn in outputs for step in turn]


def _check_outputs_shape(case: Mapping, multi_turn: bool) -> None:
    outputs = case.get("outputs")
    if multi_turn:
        ok = isinstance(outputs, list) and all(
            isinstance(turn, list) and all(isinstance(step, str) for step in turn) for turn in outputs
        )
        if not ok:
            raise ValueError(f"case {case.get('id')!r}: multi-turn outputs must be a list of lists of strings")
    elif not isinstance(outputs, str):
        raise ValueError(f"case {case.get('id')!r}: single-turn outputs must be a string")


def _error_type(verdict: Mapping) -> str | None:
    """bfcl-eval puts the error type at the top (AST, relevance) or under "error" (multi-turn)."""
    if verdict.get("error_type"):
        return verdict["error_type"]
    error = verdict.get("error")
    return error.get("error_type") if isinstance(error, Mapping) else None


class Scorer:
    """Holds one handler and the wheel's entries/answers, loaded per category on first use."""

    def __init__(self) -> None:
        set_scratch_root()
        from bfcl_eval.constants.enums import Language, ReturnFormat

        from dara.evaluation import bfcl_handler

        self.model_name = bfcl_handler.register()
        self.handler = bfcl_handler.make_handler()
        self._entries: dict[str, dict] = {}
        self._answers: dict[str, dict] = {}
        self._language = {"java": (Language.JAVA, ReturnFormat.JAVA),
                          "javascript": (Language.JAVASCRIPT, ReturnFormat.JAVASCRIPT),
                          "python": (Language.PYTHON, ReturnFormat.PYTHON)}  # fmt: skip

    def _wheel_case(self, case_id: str) -> tuple[dict, object]:
        category = category_of(case_id)
        if category not in self._entries:
            self._entries[category] = load_entries(category, for_generation=False)
            self._answers[category] = load_possible_answers(category)
        if case_id not in self._entries[category]:
            raise ValueError(f"unknown BFCL case id {case_id!r}")
        return json.loads(json.dumps(self._entries[category][case_id])), self._answers[category][case_id]

    def score(self, case: Mapping) -> dict:
        if "id" not in case or "outputs" not in case:
            raise ValueError(f"a case needs 'id' and 'outputs': {case}")
        case_id = case["id"]
        if "category" in case:
            category = case["category"]
            if category not in CUSTOM_CATEGORIES:
                raise ValueError(f"case {case_id!r}: custom category must be one of {CUSTOM_CATEGORIES}, got {category!r}")
            for key in ("function", "ground_truth"):
                if key not in case:
                    raise ValueError(f"custom case {case_id!r} lacks {key!r}")
            entry, answer = {"id": case_id, "function": case["function"]}, case["ground_truth"]
        else:
            category = category_of(case_id)
            if category not in PAPER_CATEGORIES:
                raise ValueError(f"case {case_id!r}: category {category!r} is not scored (see PAPER_CATEGORIES)")
            entry, answer = self._wheel_case(case_id)
        multi_turn = category.startswith("multi_turn")
        _check_outputs_shape(case, multi_turn)
        if multi_turn:
            verdict = self._multi_turn(case_id, case["outputs"], answer, entry, category)
        elif category == "irrelevance":
            from bfcl_eval.eval_checker.eval_runner import _evaluate_single_relevance_entry

            verdict = _evaluate_single_relevance_entry(
                self.handler, case_id, case["outputs"], entry, self.model_name, category
            )
        else:
            verdict = self._single_turn(case_id, case["outputs"], answer, entry, category)
        return {
            "id": case_id,
            "category": category,
            "valid": bool(verdict["valid"]),
            "format": case_format(_flatten_outputs(case["outputs"])),
            "length": case_think_length(_flatten_outputs(case["outputs"])),
            "error_type": _error_type(verdict),
        }

    def _single_turn(self, case_id, output, answer, entry, category) -> dict:
        from bfcl_eval.eval_checker.eval_runner import _evaluate_single_ast_entry

        language = "java" if category == "simple_java" else "javascript" if category == "simple_javascript" else "python"
        lang, return_format = self._language[language]
        return _evaluate_single_ast_entry(
            self.handler, case_id, output, answer, entry, self.model_name, category,
            language=lang, return_format=return_format, has_tool_call_tag=False,
        )  # fmt: skip

    def _multi_turn(self, case_id, outputs, answer, entry, category) -> dict:
        from bfcl_eval.eval_checker.eval_runner import _evaluate_single_multi_turn_entry
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

        try:
            return _evaluate_single_multi_turn_entry(
                self.handler, case_id, outputs, answer, entry, self.model_name, category
            )
        finally:
            # The simulated APIs live as module globals keyed by model and entry id; drop this entry's
            # instances so memory stays flat and a later case with the same id starts fresh.
            key = re.sub(r"[-./:]", "_", case_id)
            for name in [n for n in vars(multi_turn_utils) if n.endswith("_instance") and f"_{key}_" in n]:
                del vars(multi_turn_utils)[name]


def score_cases(cases: Sequence[Mapping]) -> dict:
    """Score cases; ids must be unique."""
    # counted in one pass: a tiny evaluation job scores tens of thousands of cases, where a count per id (quadratic)
    # took longer than the scoring itself
    duplicates = sorted(i for i, n in Counter(case.get("id") for case in cases).items() if n > 1)
    if duplicates:
        raise ValueError(f"duplicate case ids: {duplicates[:5]}")
    scorer = Scorer()
    scored = [scorer.score(case) for case in cases]
    per_category = category_means(scored)
    complete = all(category in per_category for category in PAPER_CATEGORIES)
    from importlib.metadata import version

    return {
        "model": scorer.model_name,
        "bfcl_eval_version": version("bfcl-eval"),
        "metrics": aggregate(per_category) if complete else None,
        "categories": per_category,
        "cases": scored,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outputs", required=True, type=Path, help="JSON file {'cases': [...]} to score")
    parser.add_argument("--out", required=True, type=Path, help="where to write the scores JSON")
    args = parser.parse_args(argv)
    payload = json.loads(args.outputs.read_text())
    if not isinstance(payload, dict) or not isinstance(payload.get("cases"), list):
        raise ValueError(f"{args.outputs}: expected a JSON object with a 'cases' list")
    write_json_atomic(args.out, score_cases(payload["cases"]))


if __name__ == "__main__":
    main()
