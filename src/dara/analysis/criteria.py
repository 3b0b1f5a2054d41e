"""The calibration's regime criteria, read on a draw's own tables: is this draw in the regime the settings were chosen
for?

docs/tiny_scale.md ("Calibration") states five criteria, fixed before the pilots that chose the tiny settings: the
sparse reward starved at step 0 (1), headroom on the dense one (2), no drift under the drift control (3), the math
task in the paper's regime (4), and the baseline's crossing observed within the run (5). Their bounds live in
``analysis/config.yaml`` (``regime_criteria``); this module reads each one on the numbers the pipeline already wrote:

- ``regime.csv`` (analysis/regime.py): step-0 densities, weights and energy shares, held-out correctness against the
  base, the training rewards' step-0 means, the late-run densities and weights, and the same per warm start;
- ``first_crossing.csv``: which seeds crossed the headline threshold;
- ``fig5.csv``: which seeds confirmed a stable length crossing at the claims' threshold.

Where a task's runs start from several warm starts, a reading is the median over warm starts of each warm start's
number (regime.md's "Per warm start" table, its median column), as the criteria are read; each quantity's median
is taken on its own, so two readings of one task may come from different warm starts. Where the runs start from
one, it is the median over seeds (regime.md's pooled tables, the same number for one warm start). Numbers that only
exist pooled (late-run densities, the training rewards, crossings) are read pooled. A reading whose inputs this draw
lacks (a task or method it did not run) is a row that says so, never a silent omission. Every bound is inclusive.

The bounds are the prose's; where its words leave a choice, the reading here makes it (written after the draw whose
tables it first read, 20be9fc's, and stated in analysis/config.yaml): criterion 2's headroom as the headline's four
methods gaining at least 10 points on the base; "varies in most groups" as a density of at least 0.5; "through the
run" as each method's last third, the lowest method's; "no method loses" on the lowest method's final minus base; "no
answer skips a step" on the run with the most such answers; criterion 5's "crosses within the run" as at least half
of GDPO's seeds, so that its median crossing step is observed rather than censored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from dara.analysis import palette
from dara.analysis.tables import main_group_size

CONTROL = "shuffled"  # the drift control's method name (analysis/regime.py's)
COLUMNS = ["criterion", "task", "reading", "value", "bound", "met", "read_on", "extreme_method"]
MEDIAN_OVER_WARM_STARTS = "median over warm starts"
POOLED = "medians over seeds"


@dataclass(frozen=True)
class Bound:
    """An inclusive interval; None on a side: unbounded there."""

    low: float | None = None
    high: float | None = None

    def holds(self, value: float) -> bool:
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def text(self) -> str:
        if self.low is not None and self.high is not None:
            return f"in [{self.low:g}, {self.high:g}]" if self.low != self.high else f"= {self.low:g}"
        return f">= {self.low:g}" if self.low is not None else f"<= {self.high:g}"


def _table(regime: pd.DataFrame, name: str) -> pd.DataFrame:
    return regime[regime["table"] == name] if "table" in regime.columns else regime.iloc[0:0]


class Readings:
    """The numbers of one draw's regime.csv, looked up the way the criteria read them."""

    def __init__(self, regime: pd.DataFrame):
        self.step0 = _table(regime, "step0")
        self.heldout = _table(regime, "heldout")
        self.training = _table(regime, "training")
        self.late = _table(regime, "late_run")
        self.per_warm_start = _table(regime, "warm_starts")

    def on_warm_starts(self, task: str, quantity: str) -> float | None:
        """The median over warm starts of a per-warm-start quantity; None where the task has no such rows."""
        own = self.per_warm_start
        if not len(own):
            return None
        values = own.loc[(own["task"] == task) & (own["quantity"] == quantity), "value"].astype(float)
        return float(values.median()) if len(values) else None

    def has_warm_starts(self, task: str) -> bool:
        return bool(len(self.per_warm_start)) and bool((self.per_warm_start["task"] == task).any())

    def pooled(self, table: pd.DataFrame, column: str, **where) -> float | None:
        rows = table
        for key, value in where.items():
            if key not in rows.columns:
                return None
            rows = rows[rows[key] == value]
        if not len(rows) or column not in rows.columns or rows[column].isna().all():
            return None
        values = rows[column].dropna().astype(float).unique()
        if len(values) > 1:  # the filters must pick one number (several rows may repeat it: a task's base)
            raise ValueError(f"regime.csv holds several {column} values for {where}: {sorted(values)}")
        return float(values[0])


def _gain_quantity(method: str) -> str:
    """The per-warm-start quantity (analysis/regime.py's) of a method's final minus base held-out correctness."""
    return f"{palette.label(method)} final minus base (points, median)"


def _row(criterion: str, task: str, reading: str, value: float | None, bound: Bound, read_on: str,
         missing: str = "", extreme_method: str = "") -> dict:
    """One reading; ``extreme_method``: for a reading over methods (the lowest or highest), the method it is."""
    if value is None or not np.isfinite(value):
        return {"criterion": criterion, "task": task, "reading": reading, "value": np.nan, "bound": bound.text(),
                "met": None, "read_on": f"not read: {missing or 'this draw has no such number'}",
                "extreme_method": ""}
    return {"criterion": criterion, "task": task, "reading": reading, "value": float(value), "bound": bound.text(),
            "met": bool(bound.holds(value)), "read_on": read_on, "extreme_method": extreme_method}


def _warm_start_or_pooled(readings: Readings, task: str, quantity: str, table: pd.DataFrame, column: str,
                          **where) -> tuple[float | None, str]:
    """A task's reading on its median warm start where its runs start from several, else pooled over seeds."""
    if readings.has_warm_starts(task):
        return readings.on_warm_starts(task, quantity), MEDIAN_OVER_WARM_STARTS
    return readings.pooled(table, column, task=task, **where), POOLED


def _bound(spec) -> Bound:
    """A bound from the config: [low, high] (an interval), or {min: x} / {max: x}."""
    if isinstance(spec, (list, tuple)):
        return Bound(float(spec[0]), float(spec[1]))
    return Bound(spec.get("min"), spec.get("max"))


def sparse_reward_starved(readings: Readings, spec: dict) -> list[dict]:
    """Criterion 1: on the sparse task at step 0, the sparse reward's density, GDPO's share of its advantage energy
    and DARA's weight on it."""
    task, reward = spec["task"], spec["sparse_reward"]
    criterion = "1 sparse reward starved"
    rows = []
    for reading, quantity, column, bound in (
            (f"{reward} density at step 0", f"{reward} density at step 0", "density_step0", spec["density"]),
            (f"GDPO's share of {reward}'s advantage energy at step 0", f"GDPO energy share of {reward} at step 0",
             "gdpo_energy_share_step0", spec["gdpo_share"]),
            (f"DARA's weight on {reward} at step 0", f"DARA weight on {reward} at step 0", "dara_weight_step0",
             spec["dara_weight"])):
        value, read_on = _warm_start_or_pooled(readings, task, quantity, readings.step0, column, reward=reward)
        rows.append(_row(criterion, task, reading, value, _bound(bound), read_on))
    return rows


def headroom(readings: Readings, spec: dict, metric: str) -> list[dict]:
    """Criterion 2: the base's held-out correctness, the dense reward varying in most groups at step 0, and each
    named method gaining on the base."""
    task, dense = spec["task"], spec["dense_reward"]
    criterion = "2 headroom"
    value, read_on = _warm_start_or_pooled(readings, task, f"base {metric} (%)", readings.heldout, "base")
    rows = [_row(criterion, task, f"base held-out {metric} (%)", value, _bound(spec["base"]), read_on)]
    value, read_on = _warm_start_or_pooled(readings, task, f"{dense} density at step 0", readings.step0,
                                           "density_step0", reward=dense)
    rows.append(_row(criterion, task, f"{dense} density at step 0", value, _bound(spec["dense_density"]), read_on))
    for method in spec["methods"]:
        label = palette.label(method)
        value, read_on = _warm_start_or_pooled(readings, task, _gain_quantity(method), readings.heldout,
                                               "median_minus_base", method=method)
        rows.append(_row(criterion, task, f"{label}'s final minus base (points)", value, _bound(spec["gain"]),
                         read_on, missing=f"no {label} runs evaluated on {task}"))
    return rows


def no_drift(readings: Readings, spec: dict, tasks) -> list[dict]:
    """Criterion 3: on each of ``tasks`` (every task with a held-out correctness metric), its drift control's final
    held-out correctness minus the base; a task without an evaluated control is a row that says so."""
    rows = []
    for task in tasks:
        value, read_on = _warm_start_or_pooled(readings, task, _gain_quantity(CONTROL), readings.heldout,
                                               "median_minus_base", method=CONTROL)
        rows.append(_row("3 no drift", task, "drift control's final minus base (points)", value,
                         _bound(spec["points"]), read_on, missing=f"no drift control evaluated on {task}"))
    return rows


def _extreme(frame: pd.DataFrame, column: str, lowest: bool) -> tuple[float | None, str]:
    """The lowest (or highest) value of ``column`` over the frame's methods, and which methods have it."""
    values = frame.dropna(subset=[column]) if column in frame.columns else frame.iloc[0:0]
    if not len(values):
        return None, ""
    numbers = values[column].astype(float)
    extreme = float(numbers.min() if lowest else numbers.max())
    return extreme, _methods_text(list(values.loc[numbers == extreme, "method"]), len(values))


def _methods_text(methods: list[str], of: int) -> str:
    """Which methods a reading over methods is (ties named; "every method" when all share it)."""
    if len(methods) == of and of > 1:
        return f"every method ({of})"
    return ", ".join(palette.label(method) for method in methods)


def math_regime(readings: Readings, spec: dict, metric: str, stable: pd.DataFrame | None,
                stable_threshold: float) -> list[dict]:
    """Criterion 4: the math task's correctness with headroom that stays dense, its length reward in the paper's
    shape, enough GDPO seeds confirming the stable length crossing, and correctness not traded for length."""
    task, correctness, length = spec["task"], spec["correctness_reward"], spec["length_reward"]
    criterion = "4 math in the paper's regime"
    rows = []
    value, read_on = _warm_start_or_pooled(readings, task, f"base {metric} (%)", readings.heldout, "base")
    rows.append(_row(criterion, task, f"base held-out {metric} (%)", value, _bound(spec["base"]), read_on))
    value, read_on = _warm_start_or_pooled(readings, task, f"{correctness} density at step 0", readings.step0,
                                           "density_step0", reward=correctness)
    rows.append(_row(criterion, task, f"{correctness} density at step 0", value,
                     _bound(spec["correctness_density"]), read_on))
    late = readings.late[(readings.late["task"] == task)] if len(readings.late) else readings.late
    methods = late[(late["reward"] == correctness) & (late["method"] != CONTROL)] if len(late) else late
    value, label = _extreme(methods, "density_last_third", lowest=True)
    rows.append(_row(criterion, task, f"{correctness} density in the last third, lowest method", value,
                     _bound(spec["correctness_density"]), POOLED, extreme_method=label))
    rows.append(_row(criterion, task, f"GDPO's {length} reward at step 0 (batch mean)",
                     readings.pooled(readings.training, "step0", task=task, method="gdpo", reward=length),
                     _bound(spec["length_step0"]), POOLED))
    rows.append(_row(criterion, task, f"GDPO's {length} reward at the middle step (batch mean)",
                     readings.pooled(readings.late, "mean_middle_step", task=task, method="gdpo", reward=length),
                     _bound(spec["gdpo_length_middle"]), POOLED))
    for method in ("dara_sym", "dara_asym"):
        label = palette.label(method)
        rows.append(_row(criterion, task, f"{label}'s {length} density in the last third",
                         readings.pooled(readings.late, "density_last_third", task=task, method=method,
                                         reward=length), _bound(spec["length_density_last_third"]), POOLED))
        rows.append(_row(criterion, task, f"{label}'s weight on {length} in the last third",
                         readings.pooled(readings.late, "weight_last_third", task=task, method=method,
                                         reward=length), _bound(spec["dara_weight_last_third"]), POOLED))
    rows.append(_row(criterion, task, f"share of GDPO's seeds confirming a stable {stable_threshold:g} {length} "
                     "reward", confirmed_share(stable, task, "gdpo", length, stable_threshold),
                     _bound(spec["confirmed_share"]), "seeds at the main G",
                     missing=f"no fig5 record of GDPO's {length} on {task}"))
    heldout = readings.heldout[(readings.heldout["task"] == task)] if len(readings.heldout) else readings.heldout
    methods = heldout[heldout["method"] != CONTROL] if len(heldout) else heldout
    gains, read_on = methods, POOLED
    if readings.has_warm_starts(task) and len(methods):  # each method's median over warm starts instead
        gains = pd.DataFrame({"method": methods["method"],
                              "median_minus_base": [readings.on_warm_starts(task, _gain_quantity(method))
                                                    for method in methods["method"]]}, dtype=object)
        read_on = MEDIAN_OVER_WARM_STARTS
    value, label = _extreme(gains, "median_minus_base", lowest=True)
    rows.append(_row(criterion, task, f"final minus base held-out {metric} (points), lowest method", value,
                     _bound(spec["final_minus_base"]), read_on, extreme_method=label))
    value, label = _extreme(methods, "skipped_step_final_max", lowest=False)
    rows.append(_row(criterion, task, "final answers skipping a step (%), the run with the most", value,
                     _bound(spec["skipped_step"]), "every run's last checkpoint", extreme_method=label))
    return rows


def _seeds_at_main_g(records: pd.DataFrame | None, task: str, method: str, reward: str,
                     threshold: float) -> pd.DataFrame | None:
    """A crossing table's rows (first_crossing.csv, fig5.csv: one per run and threshold) of one method, reward and
    threshold at the task's main G (the one with the most runs, not a group-size sweep's); None without any."""
    if records is None or not len(records):
        return None
    task_runs = records[records["task"] == task]
    own = task_runs[(task_runs["method"] == method) & (task_runs["reward"] == reward)
                    & np.isclose(task_runs["threshold"].astype(float), threshold)]
    return own[own["G"] == main_group_size(task_runs)] if len(own) else None


def confirmed_share(stable: pd.DataFrame | None, task: str, method: str, reward: str,
                    threshold: float) -> float | None:
    """The share of a method's seeds at the task's main G whose reward confirmed a stable crossing of
    ``threshold``; None without a record."""
    own = _seeds_at_main_g(stable, task, method, reward, threshold)
    return None if own is None else float((own["status"] == "confirmed").mean())


def measurable(crossings: pd.DataFrame | None, spec: dict) -> list[dict]:
    """Criterion 5: the share of GDPO's seeds at the task's main G whose reward crossed the threshold in the run
    (at least half: the median crossing step is observed rather than censored)."""
    task, reward, threshold = spec["task"], spec["reward"], float(spec["threshold"])
    reading = f"share of GDPO's seeds crossing {reward} {threshold:g} within the run"
    own = _seeds_at_main_g(crossings, task, "gdpo", reward, threshold)
    value = None if own is None else float(own["step"].notna().mean())
    return [_row("5 measurable", task, reading, value, _bound(spec["crossed_share"]), "seeds at the main G",
                 missing=f"no first-crossing record of GDPO's {reward} on {task}")]


def read_criteria(regime: pd.DataFrame, crossings: pd.DataFrame | None, stable: pd.DataFrame | None,
                  config: dict) -> pd.DataFrame:
    """Every criterion of ``config['regime_criteria']`` read on one draw's tables (the module's docstring says
    how); one row per reading, `COLUMNS`."""
    spec = config["regime_criteria"]
    readings = Readings(regime)
    heldout_metric = config["heldout_correctness"]
    rows = [*sparse_reward_starved(readings, spec["sparse_reward_starved"]),
            *headroom(readings, spec["headroom"], heldout_metric[spec["headroom"]["task"]]),
            *no_drift(readings, spec["no_drift"], heldout_metric),
            *math_regime(readings, spec["math"], heldout_metric[spec["math"]["task"]], stable,
                         float(config["stable_crossing"]["claim_threshold"])),
            *measurable(crossings, spec["measurable"])]
    return pd.DataFrame(rows, columns=COLUMNS)


def _met_or_none(met) -> bool | None:
    """A reading's ``met`` as written (True, False) or read back from CSV (NaN where it was not read)."""
    return None if met is None or (isinstance(met, float) and np.isnan(met)) else bool(met)


def met_text(met) -> str:
    met = _met_or_none(met)
    return "not read" if met is None else "met" if met else "**not met**"


def _method_text(frame: pd.DataFrame, column: str) -> list[str]:
    return ["" if not isinstance(m, str) else m for m in frame[column]]


def markdown(table: pd.DataFrame) -> str:
    """The readings as regime criteria pages show them."""
    shown = table.assign(value=[f"{v:.3g}" if np.isfinite(v) else "" for v in table["value"].astype(float)],
                         met=[met_text(m) for m in table["met"]],
                         extreme_method=_method_text(table, "extreme_method"))
    return shown.rename(columns={"extreme_method": "which method"}).to_markdown(index=False)


def summary(table: pd.DataFrame) -> str:
    """One sentence: how many readings are met, which are not, which could not be read."""
    met = table["met"].map(_met_or_none)
    read = met.notna()
    failed = table[read & (met == False)]  # noqa: E712 (a column of True/False/None)
    text = f"{int((met == True).sum())} of {int(read.sum())} readings meet their criterion"  # noqa: E712
    if len(failed):
        text += "; not met: " + "; ".join(f"{row.criterion} on {row.task}: {row.reading} {row.value:.3g} "
                                          f"(bound {row.bound})" for row in failed.itertuples())
    if (~read).any():
        text += f"; {int((~read).sum())} not read (this draw lacks their runs)"
    return text + "."


BOTH_MET, NEITHER_MET, ONE_OF_TWO = "met in both", "not met in both", "met in one of two"
UNREAD_IN_ONE, UNREAD_IN_BOTH = "not read in one", "not read in either"
PAIRED_COLUMNS = ["criterion", "task", "reading", "bound", "value_study", "met_study", "extreme_method_study",
                  "value_replicate", "met_replicate", "extreme_method_replicate", "agreement"]


def compare_draws(study: pd.DataFrame, replicate: pd.DataFrame) -> pd.DataFrame:
    """Two draws' readings (criteria.csv of each) side by side, one row per reading of the study, with whether the
    criterion is met in both, in neither, or in one of the two (which makes it a property of the draw, not of the
    setting). Readings are matched by criterion, task and reading; one only one draw has raises."""
    key = ["criterion", "task", "reading"]
    # an empty cell (a reading of no task) reads back from CSV as NaN, which would match nothing
    study, replicate = (frame.assign(**{column: frame[column].fillna("") for column in key})
                        for frame in (study, replicate))
    for name, frame in (("study", study), ("replicate", replicate)):
        repeated = frame[frame.duplicated(key, keep=False)]
        if len(repeated):
            raise ValueError(f"the {name}'s criteria table repeats readings: {repeated[key].values.tolist()}")
    only = set(map(tuple, study[key].values)) ^ set(map(tuple, replicate[key].values))
    if only:
        raise ValueError(f"the draws' criteria tables do not hold the same readings; only in one: {sorted(only)}")
    theirs = replicate.set_index(key)
    rows = []
    for ours in study.itertuples(index=False):
        other = theirs.loc[(ours.criterion, ours.task, ours.reading)]
        met = (_met_or_none(ours.met), _met_or_none(other["met"]))
        unread = met.count(None)
        agreement = (UNREAD_IN_BOTH if unread == 2 else UNREAD_IN_ONE if unread else BOTH_MET if all(met)
                     else NEITHER_MET if not any(met) else ONE_OF_TWO)
        rows.append({"criterion": ours.criterion, "task": ours.task, "reading": ours.reading, "bound": ours.bound,
                     "value_study": ours.value, "met_study": met[0], "extreme_method_study": ours.extreme_method,
                     "value_replicate": float(other["value"]), "met_replicate": met[1],
                     "extreme_method_replicate": other["extreme_method"], "agreement": agreement})
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def paired_markdown(paired: pd.DataFrame) -> str:
    shown = paired.copy()
    for side in ("study", "replicate"):
        shown[f"value_{side}"] = [f"{v:.3g}" if np.isfinite(v) else "" for v in shown[f"value_{side}"].astype(float)]
        shown[f"met_{side}"] = [met_text(m) for m in shown[f"met_{side}"]]
        shown[f"extreme_method_{side}"] = _method_text(shown, f"extreme_method_{side}")
    return shown.rename(columns={f"extreme_method_{side}": f"which method ({side})"
                                 for side in ("study", "replicate")}).to_markdown(index=False)


def paired_summary(paired: pd.DataFrame) -> str:
    counts = paired["agreement"].value_counts()
    text = (f"{counts.get(BOTH_MET, 0)} of {len(paired)} readings meet their criterion in both draws, "
            f"{counts.get(NEITHER_MET, 0)} in neither, {counts.get(ONE_OF_TWO, 0)} in one of the two")
    for unread in (UNREAD_IN_ONE, UNREAD_IN_BOTH):
        if counts.get(unread, 0):
            text += f", {counts[unread]} {unread}"
    split = paired[paired["agreement"] == ONE_OF_TWO]
    if len(split):
        text += ("; in one of the two (a property of the draw, not of the setting): "
                 + "; ".join(f"{row.task}: {row.reading}" for row in split.itertuples()))
    return text + "."
