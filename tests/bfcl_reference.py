"""Reference outputs for BFCL-v4 test entries: the wheel's ground truth written in ToolRL's format,
optionally perturbed. A check of the scoring path (decode -> bfcl-eval checker -> aggregation), not a model: the
tests' (tests/test_eval_bfcl.py), so it lives beside them and is no part of the package.

    .venv-bfcl/bin/python tests/bfcl_reference.py --out outputs.json \
        [--categories simple_python live_simple ...] [--per-category 10] [--perturb wrong_value]

Rendering: each ground-truth call with, for every parameter, the first accepted value (parameters whose
only accepted value is "" — optional, may be omitted — are left out). Multi-turn ground truth (Python call
strings, sometimes positional) is mapped to keyword parameters through the simulated API's signature;
each turn is one tool-call step followed by a response-only step, a turn without ground truth is one
response-only step.

Perturbations (each case carries `perturbed`: whether it could be applied):
- `wrong_value`: the first required scalar parameter of the first call gets a value no answer accepts;
- `wrong_name`: the first call's function name gets a suffix;
- `drop_call`: the last call of the case (multi-turn: of its first turn with calls) is removed;
- `empty`: every output is the empty string.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
from collections.abc import Sequence
from pathlib import Path

from dara.evaluation.bfcl_aggregate import PAPER_CATEGORIES, category_of
from dara.evaluation.bfcl_data import is_multi_turn_id, load_entries, load_possible_answers, sample_ids, set_scratch_root
from dara.io import write_json_atomic
from dara.rewards.toolrl import render_answer

PERTURBATIONS = ("none", "wrong_value", "wrong_name", "drop_call", "empty")
THINK = "I should call the tools the user needs."
DONE = "The requested steps are done."
DECLINE = "I cannot complete this request with the available tools."


def _first_literal(options: list):
    """The first accepted value that is not the 'may be omitted' marker "" (None when only "" is accepted)."""
    for option in options:
        if option != "":
            return option
    return None


def _resolve_dict(accepted: dict) -> dict:
    """A dict-typed value: bfcl-eval lists accepted values per key, one level deep (`dict_checker`)."""
    resolved = {key: _first_literal(options) for key, options in accepted.items()}
    return {key: value for key, value in resolved.items() if value is not None}


def _first_accepted(options: list):
    """A parameter's value: its first accepted option, with dict options (and lists of them) resolved."""
    value = _first_literal(options)
    if isinstance(value, dict):
        return _resolve_dict(value)
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [_resolve_dict(item) for item in value]
    return value


def _java_element(value) -> str:
    """A Java literal as bfcl-eval's `parse_java_value` reads it back (strings quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _source_literal(value, language: str, type_name: str, item_type: str | None) -> str:
    """A value as Java / JavaScript source text: bfcl-eval expects every Java/JS argument as a string and
    parses it back by the documented type (`java_type_converter`, `js_type_converter`), whose collection
    parsers differ in quoting: typed `Array` items are read raw, `ArrayList<String>` items and untyped items
    as quoted literals."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if language == "java":
        if type_name == "long":
            return f"{value}L"
        if type_name == "float":
            return f"{value}f"
        if type_name == "HashMap" and isinstance(value, dict):
            puts = " ".join(f'put("{k}", {_java_element(v)});' for k, v in value.items())
            return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
        if isinstance(value, list):
            if type_name == "ArrayList":
                items = [_java_element(v) if item_type in (None, "String") else _source_literal(v, language, item_type, None) for v in value]
                return f"new ArrayList<>(Arrays.asList({', '.join(items)}))"
            if item_type:
                items = [v if isinstance(v, str) else _source_literal(v, language, item_type, None) for v in value]
            else:
                items = [_java_element(v) for v in value]
            return f"new {item_type or 'Object'}[]{{{', '.join(items)}}}"
        return str(value)
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def ast_calls(ground_truth: list[dict]) -> list[dict]:
    """Calls of a single-turn answer: each parameter at its first accepted value ("" = omittable: left out)."""
    calls = []
    for call in ground_truth:
        ((name, parameters),) = call.items()
        resolved = {key: _first_accepted(options) for key, options in parameters.items()}
        calls.append({"name": name, "parameters": {k: v for k, v in resolved.items() if v is not None}})
    return calls


def as_source(calls: list[dict], functions: list[dict], language: str) -> list[dict]:
    """Java / JavaScript calls with every value written as source text, by the documented parameter type."""
    docs = {function["name"]: function["parameters"].get("properties", {}) for function in functions}
    out = []
    for call in calls:
        properties = docs.get(call["name"], {})
        parameters = {
            key: _source_literal(value, language, properties[key]["type"], properties[key].get("items", {}).get("type"))
            if key in properties else value
            for key, value in call["parameters"].items()
        }  # fmt: skip
        out.append({"name": call["name"], "parameters": parameters})
    return out


def _method_parameters(involved_classes: list[str]) -> dict[str, list[str]]:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    names: dict[str, list[str]] = {}
    for class_name in involved_classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for method_name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not method_name.startswith("_"):
                names[method_name] = [p for p in inspect.signature(method).parameters if p != "self"]
    return names


def execution_calls(call_strings: list[str], signatures: dict[str, list[str]]) -> list[dict]:
    """`"mv('a', destination='b')"` -> `{"name": "mv", "parameters": {"source": "a", "destination": "b"}}`."""
    calls = []
    for text in call_strings:
        node = ast.parse(text, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError(f"not a plain function call: {text!r}")
        name = node.func.id
        if node.args and name not in signatures:
            raise ValueError(f"positional arguments for unknown method {name!r}")
        parameters = {signatures[name][i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
        parameters.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
        calls.append({"name": name, "parameters": parameters})
    return calls


def _changed_scalar(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7919
    if isinstance(value, str):
        return value + " qqq"  # bfcl's string check ignores case, spaces and punctuation: add letters
    return None


def _wrong_value(calls: list[dict], ground_truth: list[dict]) -> bool:
    ((_, options_by_param),) = ground_truth[0].items()
    for key, options in options_by_param.items():
        if "" in options or key not in calls[0]["parameters"]:
            continue
        changed = _changed_scalar(calls[0]["parameters"][key])
        if changed is not None and changed not in options:
            calls[0]["parameters"][key] = changed
            return True
    return False


def _single_turn_case(case_id: str, entry: dict, ground_truth: list[dict], perturb: str) -> dict:
    language = {"simple_java": "java", "simple_javascript": "javascript"}.get(category_of(case_id), "python")
    calls = ast_calls(ground_truth)
    perturbed = True
    if perturb == "wrong_value":
        perturbed = _wrong_value(calls, ground_truth)
    elif perturb == "wrong_name":
        calls[0]["name"] += "_wrong"
    elif perturb == "drop_call":
        calls = calls[:-1]
    if language != "python":  # after perturbing: a changed value must change what bfcl-eval parses back
        calls = as_source(calls, entry["function"], language)
    output = render_answer(THINK, calls) if calls else render_answer(THINK, response=DECLINE)
    return {"id": case_id, "outputs": "" if perturb == "empty" else output, "perturbed": perturbed}


def _multi_turn_case(case_id: str, entry: dict, ground_truth: list[list[str]], perturb: str) -> dict:
    signatures = _method_parameters(entry["involved_classes"])
    turns = [execution_calls(turn, signatures) for turn in ground_truth]
    perturbed = perturb in ("none", "empty")
    for calls in turns:
        if not calls or perturbed:
            continue
        if perturb == "wrong_name":
            calls[0]["name"] += "_wrong"
        elif perturb == "drop_call":
            calls.pop()
        elif perturb == "wrong_value":
            scalars = [k for k, v in calls[0]["parameters"].items() if _changed_scalar(v) is not None]
            if not scalars:
                continue
            calls[0]["parameters"][scalars[0]] = _changed_scalar(calls[0]["parameters"][scalars[0]])
        perturbed = True
    outputs = []
    for calls in turns:
        steps = [render_answer(THINK, calls), render_answer(THINK, response=DONE)] if calls else [render_answer(THINK, response=DECLINE)]
        outputs.append([""] * len(steps) if perturb == "empty" else steps)
    return {"id": case_id, "outputs": outputs, "perturbed": perturbed}


def reference_cases(categories: Sequence[str], per_category: int | None, perturb: str) -> list[dict]:
    if perturb not in PERTURBATIONS:
        raise ValueError(f"unknown perturbation {perturb!r}; expected one of {PERTURBATIONS}")
    set_scratch_root()
    cases = []
    for category in categories:
        entries = load_entries(category, for_generation=False)
        answers = load_possible_answers(category)
        for case_id in sample_ids(category, per_category):
            if is_multi_turn_id(case_id):
                cases.append(_multi_turn_case(case_id, entries[case_id], answers[case_id], perturb))
            else:
                cases.append(_single_turn_case(case_id, entries[case_id], answers[case_id], perturb))
    for case in cases:
        assert category_of(case["id"]) in categories
    return cases


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--categories", nargs="+", default=list(PAPER_CATEGORIES), choices=PAPER_CATEGORIES)
    parser.add_argument("--per-category", type=int, default=None, help="evenly spaced sample size (default: all)")
    parser.add_argument("--perturb", default="none", choices=PERTURBATIONS)
    args = parser.parse_args(argv)
    write_json_atomic(args.out, {"cases": reference_cases(args.categories, args.per_category, args.perturb)})


if __name__ == "__main__":
    main()
