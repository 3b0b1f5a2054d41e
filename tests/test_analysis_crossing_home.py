"""One home for steps, crossings, censoring and the median of crossing steps: dara.analysis.crossing.

Every script and module is read as a syntax tree and fails this test when it computes a crossing or a summary of
crossing steps itself instead of asking dara.analysis.crossing:

- ``inf-median``: ``.fillna(np.inf)`` (or ``math.inf``, ``float("inf")``): never-crossing runs counted as infinitely
  late before a plain median, the rule the Kaplan-Meier median replaced (``crossing.median_crossing_step``);
- ``step-filter``: ``x["step"] >= 1`` / ``x["step"] > 0`` / ``x.step >= 1``: the training rows picked by hand
  (``crossing.training_steps``);
- ``reward-threshold``: ``>=`` or ``>`` between a ``reward/...`` column and anything, or between anything and a
  name holding "threshold": a crossing found by hand (``crossing.first_crossing``, ``crossing.crossing_records``);
- ``step-statistic``: ``np.interp(...)``, or a median/quantile/percentile taken directly of a ``["step"]`` or
  ``["duration"]`` column: crossing steps summarised by another rule (``crossing.summarise_crossings``);
- ``kaplan-meier``: a call of ``kaplan_meier(...)``: a median or quantile of crossing steps read off a curve by hand.

Each exception names why it is not a crossing (``ALLOWED``); ``TO_FIX`` holds a known offender in a file owned
elsewhere, with the call it should make, and fails once it is fixed so that the entry goes.
"""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOME = {"src/dara/analysis/crossing.py", "src/dara/analysis/kaplan_meier.py"}  # the rules and the estimator
SCANNED = sorted({*(REPO / "src/dara").rglob("*.py"), *(REPO / "analysis").rglob("*.py"),
                  *(REPO / "benchmarks").glob("*.py")})

# (file, rule) -> why the match is not a crossing computed by hand
ALLOWED = {
    ("src/dara/analysis/summary.py", "reward-threshold"):
        "retain_runs: Table 1's retention rule (held-out validation format at the selection step >= 0.8), a filter "
        "of evaluations, not a training crossing",
    ("src/dara/analysis/mechanism_toy.py", "reward-threshold"):
        "the toy simulation stops once its success probability reaches the threshold and records step and reached; "
        "crossing.outcome_records turns that into crossing records",
    ("src/dara/analysis/figures.py", "kaplan-meier"):
        "plot_kaplan_meier draws the survival curves; it reads no median off them",
    ("benchmarks/bench_verl_cpu.py", "step-filter"):
        "train_side leaves the first logged step out of its timing medians (it pays for start-up), a benchmark of "
        "seconds per step, not a crossing",
    ("benchmarks/gpu_check.py", "step-filter"):
        "the verl part's timing leaves the first logged step out of its median seconds per step (start-up), as "
        "bench_verl_cpu does; not a crossing",
    ("analysis/table4a.py", "step-filter"):
        "compared_step lists the evaluated checkpoints other than the base (step 0) to pick the one Table 4a reads; "
        "held-out evaluations, not a training crossing",
}

# (file, rule) -> the call that replaces it. Owned by another change: fix there, then remove the entry here.
TO_FIX: dict = {}

STEP_STATISTICS = {"median", "quantile", "percentile", "nanmedian", "nanquantile", "nanpercentile"}
STEP_COLUMNS = {"step", "duration"}  # crossing steps, and crossing-or-censoring steps (survival_durations)


def _is_infinity(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "inf":
        return True  # np.inf, numpy.inf, math.inf
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).lower().lstrip("+") in {"inf", "infinity"})


def _column_key(node: ast.AST | None) -> str | None:
    """The column a ``frame[...]``, ``frame.loc[rows, ...]`` or ``frame.step`` names; an f-string's leading text."""
    if isinstance(node, ast.Attribute) and node.attr == "step":
        return "step"
    if not isinstance(node, ast.Subscript):
        return None
    key = node.slice
    if isinstance(key, ast.Tuple) and key.elts:  # .loc[rows, "step"]
        key = key.elts[-1]
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    if isinstance(key, ast.JoinedStr) and key.values and isinstance(key.values[0], ast.Constant):
        return str(key.values[0].value)
    return None


def _names_threshold(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Name) and "threshold" in node.id.lower())
            or (isinstance(node, ast.Attribute) and "threshold" in node.attr.lower()))


def _is_constant(node: ast.AST, value) -> bool:
    return isinstance(node, ast.Constant) and node.value == value and not isinstance(node.value, bool)


def _rules(node: ast.AST):
    """The rules ``node`` breaks (see the module docstring)."""
    if isinstance(node, ast.Call):
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        if name == "fillna" and node.args and _is_infinity(node.args[0]):
            yield "inf-median"
        if name == "interp":
            yield "step-statistic"
        if name in STEP_STATISTICS:
            # frame["step"].median(), or np.median(<anything reading frame["step"]>)
            receiver = function.value if isinstance(function, ast.Attribute) else None
            if _column_key(receiver) in STEP_COLUMNS or any(
                    _column_key(part) in STEP_COLUMNS for argument in node.args for part in ast.walk(argument)):
                yield "step-statistic"
        if name == "kaplan_meier":
            yield "kaplan-meier"
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, op, right = node.left, node.ops[0], node.comparators[0]
        if isinstance(op, (ast.Lt, ast.LtE)):  # 1 <= x["step"] is x["step"] >= 1
            left, right, op = right, left, ast.GtE() if isinstance(op, ast.LtE) else ast.Gt()
        if isinstance(op, (ast.GtE, ast.Gt)):
            from_step_one = ((isinstance(op, ast.GtE) and _is_constant(right, 1))
                             or (isinstance(op, ast.Gt) and _is_constant(right, 0)))
            if _column_key(left) == "step" and from_step_one:
                yield "step-filter"
            if str(_column_key(left) or "").startswith("reward/") or _names_threshold(right):
                yield "reward-threshold"


def _offences() -> dict[tuple[str, str], list[int]]:
    found: dict[tuple[str, str], list[int]] = {}
    for path in SCANNED:
        relative = path.relative_to(REPO).as_posix()
        if relative in HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=relative)):
            for rule in _rules(node):
                found.setdefault((relative, rule), []).append(node.lineno)
    return found


def test_the_scan_covers_the_scripts_the_pilot_and_the_benchmarks():
    scanned = {path.relative_to(REPO).as_posix() for path in SCANNED}
    assert {"src/dara/pilot.py", "analysis/toy.py", "analysis/notebooks/tables_and_claims.py",
            "benchmarks/verl_cpu_rerun.py", "src/dara/analysis/claims.py"} <= scanned


def test_no_script_computes_a_crossing_or_its_median_itself():
    offences = _offences()
    unexpected = {key: lines for key, lines in offences.items() if key not in ALLOWED and key not in TO_FIX}
    assert not unexpected, (
        "crossing rules outside dara.analysis.crossing (ask it: training_steps, first_crossing, crossing_records, "
        "survival_durations, summarise_crossings / crossing_summary / median_crossing_step): "
        + "; ".join(f"{path} lines {lines}: {rule}" for (path, rule), lines in sorted(unexpected.items())))
    # a fixed offender must leave TO_FIX, or a new hand-made crossing in its file would pass unseen (an allowance
    # that no longer matches is only a stale reason: other changes edit those files at their own pace)
    fixed = sorted(key for key in TO_FIX if key not in offences)
    assert not fixed, f"fixed, so remove them from TO_FIX: {fixed}"


def _rules_of(source: str) -> set[str]:
    return {rule for node in ast.walk(ast.parse(source)) for rule in _rules(node)}


def test_the_scan_catches_each_way_of_computing_a_crossing_by_hand():
    assert _rules_of("m = float(np.median(steps.fillna(np.inf)))") == {"inf-median"}
    assert _rules_of("m = steps.fillna(float('inf'))") == {"inf-median"}
    assert _rules_of('rows = metrics[metrics["step"] >= 1]') == {"step-filter"}
    assert _rules_of('rows = metrics[0 < metrics["step"]]') == {"step-filter"}
    assert _rules_of("rows = metrics[metrics.step >= 1]") == {"step-filter"}
    assert _rules_of('hit = metrics[metrics[f"reward/{reward}"] >= level]') == {"reward-threshold"}
    assert _rules_of("hit = values >= threshold") == {"reward-threshold"}
    assert _rules_of('q = toy.groupby("G")["step"].quantile([0.25, 0.5])') == {"step-statistic"}
    assert _rules_of('m = np.median(records["step"].dropna())') == {"step-statistic"}
    assert _rules_of('m = runs.loc[crossed, "duration"].median()') == {"step-statistic"}
    assert _rules_of("y = np.interp(steps, xs, ys)") == {"step-statistic"}
    assert _rules_of("km = kaplan_meier(d, o)") == {"kaplan-meier"}
    # what is not a crossing passes: the last step, a step-0 row, the median of another column
    assert _rules_of('last = run["step"].max(); first = runs[runs["step"] == 0]; s = run["seconds"].median()') == set()
    assert _rules_of('early = metrics[metrics["step"] <= 4]; later = metrics[metrics["step"] > 1]') == set()
