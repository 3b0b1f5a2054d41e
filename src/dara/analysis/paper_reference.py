"""The paper's numbers, read from ``analysis/reference/*.csv``, and the statements REPORT.md makes of them.

Nothing here holds a number of the paper: every value a statement quotes is computed from the rows it
selects, and every statement names those rows (file and selection), so a corrected CSV reaches REPORT.md
and a reader can find the row behind each number. A selection that matches no row raises: a claim that
points at nothing is a bug, not a blank cell.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from dara.analysis import palette
from dara.analysis.crossing import median_crossing_step

# The paper's tool-calling runs are 100 steps long: a seed without a step in format_crossing_steps.csv "never
# [crossed] within 100 steps" (analysis/reference/README.md), so it is censored there.
PAPER_TOOL_STUDY_STEPS = 100


@dataclass(frozen=True)
class PaperStatement:
    """What the paper says (``text``, with its numbers filled in from the rows) and where (``reference``:
    ``file [column=value, ...]``)."""

    text: str
    reference: str


def _value_text(value) -> str:
    # "/", not "|": the citation sits in a Markdown table cell
    return "/".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)


def _citation(name: str, where: Mapping[str, object]) -> str:
    selection = ", ".join(f"{column}={_value_text(value)}" for column, value in where.items())
    return f"{name} [{selection}]" if selection else name


def _number(value: float) -> str:
    """A step, threshold or median: shortest form (14, 9.5, 0.8); inf is a median of never-crossing seeds."""
    return "never" if not np.isfinite(value) else f"{value:g}"


def _score(value: float) -> str:
    """A benchmark score in percent, with the two decimals the paper prints."""
    return f"{value:.2f}"


def _reference_label(method: str, note) -> str:
    """Our label of a method, or the paper's own name with its note for a row we have no method for."""
    return palette.label(method) if method in palette.METHOD_LABELS else f"{method} ({note})"


def _methods_text(methods: Sequence[str]) -> str:
    return "/".join(palette.label(m) for m in methods)


class PaperReference:
    """The reference tables of one folder (``analysis/reference`` by default)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    @cache  # noqa: B019 - one PaperReference per REPORT.md; the cache lives as long as it does
    def table(self, name: str) -> pd.DataFrame:
        path = self.directory / name
        if not path.is_file():
            raise FileNotFoundError(f"no reference table {path}")
        return pd.read_csv(path)

    def select(self, name: str, **where) -> pd.DataFrame:
        """Rows of ``name`` whose columns equal the given values (a list or tuple: any of them)."""
        table = self.table(name)
        mask = pd.Series(True, index=table.index)
        for column, value in where.items():
            if column not in table.columns:
                raise KeyError(f"{name} has no column {column!r}; it has {list(table.columns)}")
            mask &= table[column].isin(value) if isinstance(value, list | tuple) else table[column].eq(value)
        rows = table[mask]
        if rows.empty:
            raise LookupError(f"no row of {_citation(name, where)}")
        return rows

    # -- the tool-calling study: first training step with format >= threshold ------------------------------

    def crossing_steps(self) -> pd.DataFrame:
        """Every seed's first crossing step (``format_crossing_steps.csv``; NaN: never), with ``last_step``: the
        paper's run length, where a never-crossing seed is censored as ours are at theirs."""
        return self.table("format_crossing_steps.csv").assign(last_step=PAPER_TOOL_STUDY_STEPS)

    def crossing_medians(self, model_size: str) -> pd.Series:
        """The study's median first crossing step per method at ``model_size`` (``crossing.median_crossing_step``:
        Kaplan-Meier, never-crossing seeds censored at the run's last step, as ours), inf ("never") when fewer
        than half of a method's seeds crossed."""
        rows = self.crossing_steps()
        rows = rows[rows["model_size"] == model_size]
        if rows.empty:
            self.select("format_crossing_steps.csv", model_size=model_size)  # raises, naming the selection
        medians = {method: median_crossing_step(runs["step"], runs["last_step"])
                   for method, runs in rows.groupby("method", sort=True)}
        return pd.Series(medians, name="step", dtype=float).rename_axis("method")

    def crossing_statement(self, methods: Sequence[str]) -> PaperStatement:
        """'<size> median a vs b steps' for every model size where all ``methods`` have seeds."""
        where = {"method": list(methods)}
        rows = self.select("format_crossing_steps.csv", **where)
        parts = []
        for size in sorted(rows["model_size"].unique()):
            medians = self.crossing_medians(size)
            if all(method in medians.index for method in methods):
                seeds = rows[rows["model_size"] == size].groupby("method")["seed"].size()
                counts = "/".join(str(seeds[m]) for m in methods)
                parts.append(f"{size}: Kaplan-Meier median of its per-seed steps "
                             f"{' vs '.join(_number(medians[m]) for m in methods)} "
                             f"(seeds {counts})")
        threshold = _number(float(rows["threshold"].iloc[0]))
        return PaperStatement(f"first step format >= {threshold}, {_methods_text(methods)}: " + "; ".join(parts),
                              _citation("format_crossing_steps.csv", where))

    def crossing_description(self, model_size: str) -> str:
        """One sentence on the paper's per-seed crossing data at ``model_size``, with every method's median."""
        rows = self.select("format_crossing_steps.csv", model_size=model_size)
        medians = self.crossing_medians(model_size)
        seeds = " ".join(str(s) for s in sorted(rows["seed"].unique()))
        threshold = _number(float(rows["threshold"].iloc[0]))
        per_method = ", ".join(f"{palette.label(m)} {_number(medians[m])}" for m in palette.ordered(medians.index))
        return (f"Paper: first training step with format >= {threshold}, model size {model_size}, seeds {seeds} "
                f"(not every method ran every seed); Kaplan-Meier median of those steps (computed here, as ours) "
                f"{per_method} "
                f"(`{_citation('format_crossing_steps.csv', {'model_size': model_size})}`).")

    # -- BFCL-v4 final scores (Table 1) ---------------------------------------------------------------------

    def final_score_statement(self, metric: str, methods: Sequence[str]) -> PaperStatement:
        where = {"metric": metric, "method": list(methods)}
        rows = self.select("bfcl_v4_final.csv", **where)
        parts = []
        for size, size_rows in rows.groupby("model_size", sort=True):
            values = size_rows.set_index("method")["mean"]
            if all(method in values.index for method in methods):
                parts.append(f"{' vs '.join(_score(values[m]) for m in methods)} ({size})")
        step = _number(float(rows["step"].iloc[0]))
        return PaperStatement(f"BFCL-v4 {metric} at step {step}, {_methods_text(methods)}: " + ", ".join(parts),
                              _citation("bfcl_v4_final.csv", where))

    def final_scores(self, model_size: str, metrics: Sequence[str]) -> pd.DataFrame:
        return self.select("bfcl_v4_final.csv", model_size=model_size, metric=list(metrics))

    # -- three rewards (Table 2) ----------------------------------------------------------------------------

    def three_rewards(self) -> pd.DataFrame:
        return self.table("three_rewards.csv")

    # -- math: static vs dynamic weights (Table 4a) and stable crossings (fig5) ------------------------------

    def static_vs_dynamic(self) -> pd.DataFrame:
        table = self.table("math_macro.csv")
        return table[table["note"].fillna("").str.startswith("static vs dynamic")]

    def static_vs_dynamic_statement(self, metric: str, methods: Sequence[str]) -> PaperStatement:
        """``metric``: a column of math_macro.csv (accuracy, exceed, joint)."""
        rows = self.static_vs_dynamic()
        rows = rows[rows["method"].isin(methods)].set_index("method")
        missing = [m for m in methods if m not in rows.index]
        if missing:
            raise LookupError(f"no static-vs-dynamic row of math_macro.csv for {missing}")
        model = rows["model"].iloc[0]
        return PaperStatement(
            f"{model} {metric}, {_methods_text(methods)}: {' vs '.join(_score(rows.loc[m, metric]) for m in methods)}",
            _citation("math_macro.csv", {"note": "static vs dynamic ...", "method": list(methods), "column": metric}))

    def stable_crossings(self) -> pd.DataFrame:
        return self.select("math_stable_crossing.csv", quantity="training_length_stable_crossing")

    def stable_crossing_statement(self, methods: Sequence[str]) -> PaperStatement:
        """Per threshold and model, the paper's stable crossing step of each of ``methods`` it reports."""
        rows = self.stable_crossings()
        parts = []
        for (threshold, model), group in rows.groupby(["threshold", "model"], sort=True):
            group = group.set_index("method")
            # a row whose method is not one of ours (the paper's "DARA", variant not stated) is quoted with its note
            shown = [m for m in methods if m in group.index] + [m for m in group.index if m not in palette.METHOD_LABELS]
            if any(m in methods for m in shown):
                parts.append(f"{_number(100 * threshold)} % {model}: " + ", ".join(
                    f"{_reference_label(m, group.loc[m, 'note'])} {_number(group.loc[m, 'step'])}" for m in shown))
        return PaperStatement("; ".join(parts), _citation("math_stable_crossing.csv",
                                                          {"quantity": "training_length_stable_crossing"}))

    def stable_crossing_rule(self) -> dict[str, int]:
        """The paper's stable-crossing window and confirmation span, in steps."""
        rows = self.select("crossing_definitions.csv", quantity="stable_crossing").set_index("parameter")["value"]
        return {"window": int(rows["window"]), "future": int(rows["future"])}

    # -- statements of figures without published numbers ---------------------------------------------------

    def figure_statement(self, figure: str) -> PaperStatement:
        where = {"figure": figure}
        row = self.select("figure_statements.csv", **where).iloc[0]
        return PaperStatement(row["statement"], _citation("figure_statements.csv", where))
