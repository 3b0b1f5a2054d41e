"""BFCL-v4 category lists and the paper's aggregation (docs/evaluation.md), in plain Python.

Importable in both environments. Input: per-case records `{"id", "category", "valid", "format"}` and
optionally `"length"` (`valid` bool from bfcl-eval's checker, `format` and `length` in [0, 1]). Output:
per-category means and the Non-Live / Live / Multi-Turn / Average accuracy, Format (and Length when every
case has one; the paper aggregates it like Format), as fractions in [0, 1].

    Non-Live   = mean(Simple, multiple, parallel, parallel_multiple), Simple = mean(python, java, javascript)
    Live       = case-weighted over live_simple, live_multiple, live_parallel, live_parallel_multiple
    Multi-Turn = mean(base, miss_func, miss_param, long_context)
    Average    = mean(Non-Live, Live, Multi-Turn)
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

SIMPLE_CATEGORIES = ("simple_python", "simple_java", "simple_javascript")
NON_LIVE_CATEGORIES = (*SIMPLE_CATEGORIES, "multiple", "parallel", "parallel_multiple")
LIVE_CATEGORIES = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
# The 14 categories (3301 cases) of the paper; web search, memory, (ir)relevance and format
# sensitivity are not part of it (web search and memory also need a network).
PAPER_CATEGORIES = (*NON_LIVE_CATEGORIES, *LIVE_CATEGORIES, *MULTI_TURN_CATEGORIES)
METRICS = ("accuracy", "format", "length")


def category_of(case_id: str) -> str:
    """`simple_python_12` -> `simple_python`, `live_simple_3-2-0` -> `live_simple` (bfcl-eval's id forms)."""
    category, _, index = case_id.rpartition("_")
    if not category or not re.fullmatch(r"\d+(-\d+)*", index):
        raise ValueError(f"not a BFCL case id (expected <category>_<index>): {case_id!r}")
    return category


def category_means(cases: Iterable[Mapping]) -> dict[str, dict[str, float]]:
    """Per category: number of cases and mean accuracy / format (/ length, if every case has one)."""
    cases = list(cases)
    scored = [m for m in ("format", "length") if cases and all(m in case for case in cases)]
    sums: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "accuracy": 0.0, **{m: 0.0 for m in scored}})
    for case in cases:
        missing = {"category", "valid", "format"} - set(case)
        if missing:
            raise ValueError(f"case {case.get('id')!r} lacks {sorted(missing)}")
        entry = sums[case["category"]]
        entry["n"] += 1
        entry["accuracy"] += float(bool(case["valid"]))
        for metric in scored:
            value = float(case[metric])
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"case {case.get('id')!r}: {metric} {value} outside [0, 1]")
            entry[metric] += value
    return {
        category: {"n": entry["n"], **{m: entry[m] / entry["n"] for m in entry if m != "n"}}
        for category, entry in sums.items()
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def aggregate(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Group scores from `category_means` output; every paper category must be present.

    Returns keys `<group>_<metric>` for group in non_live/live/multi_turn/average and metric in
    accuracy/format (/length).
    """
    missing = [c for c in PAPER_CATEGORIES if c not in per_category]
    if missing:
        raise ValueError(f"cannot aggregate BFCL scores: categories missing: {missing}")
    out: dict[str, float] = {}
    for metric in [m for m in METRICS if all(m in per_category[c] for c in PAPER_CATEGORIES)]:
        simple = _mean([per_category[c][metric] for c in SIMPLE_CATEGORIES])
        non_live = _mean(
            [simple] + [per_category[c][metric] for c in ("multiple", "parallel", "parallel_multiple")]
        )
        live_n = sum(per_category[c]["n"] for c in LIVE_CATEGORIES)
        live = sum(per_category[c][metric] * per_category[c]["n"] for c in LIVE_CATEGORIES) / live_n
        multi_turn = _mean([per_category[c][metric] for c in MULTI_TURN_CATEGORIES])
        out[f"non_live_{metric}"] = non_live
        out[f"live_{metric}"] = live
        out[f"multi_turn_{metric}"] = multi_turn
        out[f"average_{metric}"] = _mean([non_live, live, multi_turn])
    return out
