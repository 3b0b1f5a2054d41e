"""Is a multi-reward GRPO run imbalanced? Density diagnostics of any rollout table (`dara diagnose`).

    dara diagnose ROLLOUTS --group COL --reward COL [--reward COL ...] [--step COL] --out DIR

``ROLLOUTS`` is a table with one row per response (parquet, CSV or JSONL), or a folder of such files read as one
table (verl writes one JSONL per step under ``trainer.rollout_data_dir``; TRL one parquet per logging step under
``<output_dir>/completions/`` with ``log_completions=True``). ``--group`` names the column that says which responses
were sampled for the same prompt (a uid, or the prompt text itself), ``--reward`` each reward's column, ``--step``
the training step (without it the whole table is step 0).

Per step and reward it writes to ``DIR/diagnostics.csv``:

- ``density``: the active-group density pi_k, the share of groups in which the reward varies (the statistic the
  paper advises to watch first);
- ``dara_weight``: DARA's weight min(w_max, sqrt(max_j pi_j / pi_k)) at these densities;
- ``energy_share_<method>`` for every method of `dara.methods`: the reward's share of the advantage energy that the
  method would give this batch: the sum over responses of the squared part of the score that comes from the reward,
  over the same sum for every reward (`dara.advantages.channel_contributions`; cross terms between rewards left
  out, before the batch normalisation). The static methods need ``--static-weights``; without them their columns
  are empty and the report says so.
- ``verdict``: ``inactive`` (density 0: no group-relative method learns from the reward in this step), ``sparse``
  (active, but max_j pi_j / pi_k >= ``--sparse-ratio``, default 4: per-reward normalisation (GDPO) gives it at most a
  quarter of the densest reward's energy per group of equal size, and DARA would weight it >= 2) or ``balanced``.

``DIR/diagnostics.png`` plots density and energy shares per step, one panel per reward; ``DIR/report.md`` gives
the per-reward summary, the run's verdict (no signal when no reward varies in at least half of the steps; else
imbalanced when a reward is sparse or inactive, while another reward is active, in at least half of the steps) and
the input's shape. Bad input (a missing column, a group of one
response, a NaN or non-numeric reward, an empty table) stops with an error that names the column, row or group;
groups of different sizes in one step are handled (the estimators take any sizes) and reported.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from dara.advantages import (EPS, TAU, W_MAX, EstimatorOptions, channel_contributions, channel_density, contribution_shares,
                             density_weights, group_layout, group_zscores)
from dara.io import replace_atomically, write_csv_atomic, write_text_atomic
from dara.methods import METHODS, TABLE, get_method

# The namespace the trainers' monitor modes (verl's dara_sync, dara.trl's DensityMonitorMixin) log under.
MONITOR_PREFIX = "dara_monitor/"

READERS = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
SOURCE_COLUMN = "__source_file__"  # which file of a folder a row came from (named in errors)
SPARSE_RATIO = 4.0
# the methods the figure draws (every method is in the CSV)
PLOTTED = ("grpo", "gdpo", "dara_sym", "dara_asym")


class DiagnoseError(ValueError):
    """Input that the diagnostics cannot read; the message names the file, column, row or group."""


@dataclass(frozen=True)
class Diagnosis:
    table: pd.DataFrame  # one row per (step, reward)
    steps: int
    rows: int
    group_sizes: dict[int, list[int]]  # step -> the distinct group sizes in it
    static_weights: tuple[float, ...] | None
    w_max: float


def read_rollouts(path: str | Path) -> pd.DataFrame:
    """One table from a parquet/CSV/JSONL file or a folder of them (files in name order; verl's and TRL's per-step
    dumps). Every file must have a known suffix: another file in the folder is an error, not skipped."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        if not files:
            raise DiagnoseError(f"{path} is an empty folder: no rollout files to read")
    elif path.is_file():
        files = [path]
    else:
        raise DiagnoseError(f"{path} does not exist")
    frames = []
    for file in files:
        kind = READERS.get(file.suffix.lower())
        if kind is None:
            raise DiagnoseError(f"{file}: unknown file type {file.suffix!r}; expected one of {sorted(READERS)}")
        try:
            if kind == "parquet":
                frame = pd.read_parquet(file)
            elif kind == "csv":
                frame = pd.read_csv(file)
            else:
                frame = pd.read_json(file, lines=True, dtype=False)
        except (ValueError, OSError) as error:
            if file.stat().st_size == 0:
                raise DiagnoseError(f"{file} is empty") from None
            raise DiagnoseError(f"{file}: cannot be read as {kind}: {error}") from None
        if len(files) > 1:
            frame[SOURCE_COLUMN] = file.name
        frames.append(frame)
    table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if table.empty:
        raise DiagnoseError(f"{path} holds no rows")
    return table


def _group_ids(column: pd.Series) -> np.ndarray:
    """Group ids as strings: a prompt given as a list of chat messages (TRL) is compared by its JSON."""
    values = column.to_numpy(dtype=object)
    return np.array([str(v) if isinstance(v, (str, int, np.integer)) else json.dumps(_plain(v), sort_keys=True)
                     for v in values], dtype=object)


def _plain(value):
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _row(table: pd.DataFrame, row: int) -> str:
    """A row as an error names it: its number in the table, and its file when a folder was read."""
    return f"row {row} (file {table[SOURCE_COLUMN].iloc[row]})" if SOURCE_COLUMN in table else f"row {row}"


def _rewards(table: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    out = np.empty((len(table), len(columns)))
    for k, column in enumerate(columns):
        values = pd.to_numeric(table[column], errors="coerce")
        bad = values.isna() & table[column].notna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise DiagnoseError(f"reward column {column!r} is not numeric: {_row(table, row)} holds "
                                f"{table[column].iloc[row]!r}")
        missing = ~np.isfinite(values.to_numpy(dtype=float))
        if missing.any():
            row = int(np.flatnonzero(missing)[0])
            raise DiagnoseError(f"reward column {column!r} has a missing or non-finite value in {_row(table, row)} "
                                f"({table[column].iloc[row]!r}); every response needs every reward")
        out[:, k] = values.to_numpy(dtype=float)
    return out


def batch_diagnostics(rewards, index, names: Sequence[str], *, w_max: float = W_MAX,
                      static_weights: Sequence[float] | None = None) -> dict[str, float]:
    """One batch's diagnostics, flat: ``groups``, and per reward ``density/<r>``, ``dara_weight/<r>`` and
    ``energy_share_<method>/<r>`` for every method (NaN for the static methods without ``static_weights``).
    ``rewards`` (N, K) and ``index`` (N group ids) as `dara.advantages.compute_advantages` takes them; the
    trainers' monitor modes log this dict every step."""
    x = torch.as_tensor(np.asarray(rewards, dtype=np.float64))
    layout = group_layout(index, x.shape[0])
    z, _, _, _ = group_zscores(x, layout, EPS)
    _, density = channel_density(z, layout, TAU)
    weights = density_weights(density, w_max)
    out = {"groups": float(layout.n_groups)}
    for k, name in enumerate(names):
        out[f"density/{name}"] = float(density[k])
        out[f"dara_weight/{name}"] = float(weights[k])
    for method in METHODS:
        spec = get_method(method)
        if spec.needs_static_weights and static_weights is None:
            shares = [float("nan")] * len(names)
        else:
            options = EstimatorOptions(w_max=w_max, static_weights=static_weights).for_method(method)
            shares = contribution_shares(channel_contributions(method, x, index, options)).tolist()
        out.update({f"energy_share_{method}/{name}": share for name, share in zip(names, shares)})
    return out


def diagnose(table: pd.DataFrame, group: str, rewards: Sequence[str], step: str | None = None, *,
             w_max: float = W_MAX, static_weights: Sequence[float] | None = None,
             sparse_ratio: float = SPARSE_RATIO) -> Diagnosis:
    """The per-step, per-reward diagnostics of a rollout table (see the module docstring)."""
    rewards = list(rewards)
    if not rewards:
        raise DiagnoseError("name at least one reward column (--reward)")
    if len(set(rewards)) != len(rewards):
        raise DiagnoseError(f"reward columns must be distinct, got {rewards}")
    wanted = [group, *rewards] + ([step] if step else [])
    absent = [c for c in wanted if c not in table.columns]
    if absent:
        raise DiagnoseError(f"no column {', '.join(map(repr, absent))} in the table; its columns: "
                            f"{', '.join(map(str, table.columns))}")
    if table.empty:
        raise DiagnoseError("the table holds no rows")
    if not sparse_ratio > 1:
        raise DiagnoseError(f"--sparse-ratio must be > 1, got {sparse_ratio}")
    if static_weights is not None and len(static_weights) != len(rewards):
        raise DiagnoseError(f"--static-weights takes one weight per reward ({len(rewards)}), got {len(static_weights)}")
    if static_weights is not None and not all(np.isfinite(w) and w >= 1 for w in static_weights):
        raise DiagnoseError(f"--static-weights must each be a finite number >= 1, got {list(static_weights)}")
    if not (np.isfinite(w_max) and w_max >= 1):
        raise DiagnoseError(f"--w-max must be a finite number >= 1, got {w_max}")
    if table[group].isna().any():
        row = int(np.flatnonzero(table[group].isna().to_numpy())[0])
        raise DiagnoseError(f"group column {group!r} is missing in {_row(table, row)}")
    values = _rewards(table, rewards)
    ids = _group_ids(table[group])
    if step:
        steps = pd.to_numeric(table[step], errors="coerce")
        if steps.isna().any() or not np.all(np.mod(steps, 1) == 0):
            row = int(np.flatnonzero((steps.isna() | (np.mod(steps.fillna(0.5), 1) != 0)).to_numpy())[0])
            raise DiagnoseError(f"step column {step!r} must hold whole numbers: {_row(table, row)} holds "
                                f"{table[step].iloc[row]!r}")
        step_of_row = steps.to_numpy(dtype=np.int64)
    else:
        step_of_row = np.zeros(len(table), dtype=np.int64)

    records, sizes = [], {}
    for s in np.unique(step_of_row):
        rows = np.flatnonzero(step_of_row == s)
        groups, counts = np.unique(ids[rows], return_counts=True)
        if counts.min() < 2:
            lonely = str(groups[int(np.argmin(counts))])
            raise DiagnoseError(f"step {s}: group {lonely!r} (column {group!r}) has one response; a group-relative "
                                f"advantage needs at least two (is {group!r} the prompt's id?)")
        sizes[int(s)] = sorted(set(int(c) for c in counts))
        found = batch_diagnostics(values[rows], ids[rows], rewards, w_max=w_max, static_weights=static_weights)
        density = np.array([found[f"density/{reward}"] for reward in rewards])
        densest = float(density.max())
        for k, reward in enumerate(rewards):
            pi = float(density[k])
            if pi == 0:
                verdict = "inactive"
            elif densest / pi >= sparse_ratio:
                verdict = "sparse"
            else:
                verdict = "balanced"
            records.append({"step": int(s), "reward": reward, "groups": int(found["groups"]), "density": pi,
                            "dara_weight": found[f"dara_weight/{reward}"],
                            **{f"energy_share_{m}": found[f"energy_share_{m}/{reward}"] for m in METHODS},
                            "verdict": verdict})
    frame = pd.DataFrame(records)
    return Diagnosis(frame, steps=len(sizes), rows=len(table), group_sizes=sizes,
                     static_weights=None if static_weights is None else tuple(float(w) for w in static_weights),
                     w_max=float(w_max))


def run_verdict(table: pd.DataFrame) -> dict[str, float]:
    """Per reward: the share of steps in which it is sparse or inactive while another reward is active."""
    active_somewhere = table.groupby("step")["density"].transform("max") > 0
    starved = table["verdict"].isin(["sparse", "inactive"]) & active_somewhere
    return starved.groupby(table["reward"], sort=False).mean().to_dict()


def report(diagnosis: Diagnosis, source: str, group: str, step: str | None, sparse_ratio: float) -> str:
    table = diagnosis.table
    starved = run_verdict(table)
    flagged = [reward for reward, share in starved.items() if share >= 0.5]
    lines = ["# Reward density diagnostics", "",
             f"Input: `{source}`, {diagnosis.rows} responses, {diagnosis.steps} step(s), groups from column "
             f"`{group}`" + (f", steps from `{step}`." if step else " (no step column: one step 0)."), ""]
    silent = float((table.groupby("step")["density"].max() == 0).mean())  # steps where no reward varies at all
    if silent >= 0.5:
        lines += [f"**Verdict: no signal.** No reward varies within any group in {silent:.0%} of the steps: a "
                  "group-relative method has nothing to learn from them (is the policy's sampling collapsed, or "
                  "the group column wrong?).", ""]
    elif flagged:
        lines += [f"**Verdict: imbalanced.** {', '.join(f'`{r}`' for r in flagged)} "
                  f"{'is' if len(flagged) == 1 else 'are'} sparse or inactive in at least half of the steps.", ""]
    else:
        lines += ["**Verdict: balanced.** No reward is sparse or inactive in half of the steps or more.", ""]
    lines += [f"Rule: a reward is *sparse* in a step when its active-group density is at most 1/{sparse_ratio:g} of "
              "the densest reward's (GDPO then gives it at most that fraction of the densest reward's advantage "
              f"energy per group, and DARA would weight it by at least {min(sparse_ratio ** 0.5, diagnosis.w_max):g}); "
              "*inactive* when no "
              "group varies in it. The run is imbalanced when some reward is sparse or inactive in half of the "
              "steps or more.", ""]
    summary = table.groupby("reward", sort=False).agg(
        density_median=("density", "median"), density_min=("density", "min"), density_max=("density", "max"),
        dara_weight_median=("dara_weight", "median"),
        gdpo_share_median=("energy_share_gdpo", "median"), grpo_share_median=("energy_share_grpo", "median"),
        dara_sym_share_median=("energy_share_dara_sym", "median"))
    summary["steps_starved"] = pd.Series(starved)
    lines += ["Per reward, medians over steps (`steps_starved`: share of steps it is sparse or inactive):", "",
              summary.reset_index().to_markdown(index=False, floatfmt=".3g"), ""]
    mixed = {s: v for s, v in diagnosis.group_sizes.items() if len(v) > 1}
    every = sorted({v for sizes in diagnosis.group_sizes.values() for v in sizes})
    if mixed:
        first = next(iter(mixed))
        lines += [f"Group sizes differ within {len(mixed)} step(s) (step {first}: {mixed[first]}). The estimators "
                  "take any sizes; check that the group column identifies one prompt's responses (two identical "
                  "prompts in one step share a group when the prompt text is the id; group ids that repeat across "
                  "steps need `--step`).", ""]
    else:
        lines += [f"Group size{'s' if len(every) > 1 else ''}: {', '.join(map(str, every))} responses per group.", ""]
    if diagnosis.static_weights is None:
        lines += ["The static methods' energy shares are empty: they need `--static-weights` (one per reward).", ""]
    lines += ["`diagnostics.csv` has every step, reward and method (`energy_share_<method>`); "
              "`diagnostics.png` plots density and the energy shares of GRPO, GDPO and DARA per step.", ""]
    return "\n".join(lines)


def figure(diagnosis: Diagnosis, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    table = diagnosis.table
    rewards = list(dict.fromkeys(table["reward"]))
    fig, axes = plt.subplots(1, len(rewards), figsize=(max(4.2 * len(rewards), 7.5), 4.0), sharey=True,
                             squeeze=False)
    labels = {m.name: m.label for m in TABLE}
    colors = {m.name: m.color for m in TABLE}
    for ax, reward in zip(axes[0], rewards):
        rows = table[table["reward"] == reward].sort_values("step")
        ax.plot(rows["step"], rows["density"], color="black", linewidth=2.2, marker="o", markersize=3,
                label="density (active groups)")
        for method in PLOTTED:
            ax.plot(rows["step"], rows[f"energy_share_{method}"], color=colors[method], linewidth=1.3,
                    marker=".", label=f"energy share, {labels[method]}")
        ax.set_title(reward)
        ax.set_xlabel("step")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("density / share of advantage energy")
    for ax in axes[0]:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles, names = axes[0][0].get_legend_handles_labels()
    # three columns keep the legend inside a two-panel figure
    fig.legend(handles, names, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    replace_atomically(path, lambda tmp: fig.savefig(tmp, dpi=130, format="png"))
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dara diagnose", description=__doc__.split("\n\n")[0])
    parser.add_argument("rollouts", help="parquet, CSV or JSONL file (one row per response), or a folder of them")
    parser.add_argument("--group", required=True, help="column of the prompt/group id (a uid or the prompt text)")
    parser.add_argument("--reward", action="append", required=True, help="a reward's column (repeat per reward)")
    parser.add_argument("--step", default=None, help="column of the training step (default: one step 0)")
    parser.add_argument("--out", required=True, type=Path, help="folder for diagnostics.csv, report.md and .png")
    parser.add_argument("--w-max", type=float, default=W_MAX, help=f"DARA's weight cap (default {W_MAX:g})")
    parser.add_argument("--static-weights", type=float, nargs="+", default=None,
                        help="one fixed weight per reward, for the static methods' shares")
    parser.add_argument("--sparse-ratio", type=float, default=SPARSE_RATIO,
                        help=f"densest / own density at which a reward counts as sparse (default {SPARSE_RATIO:g})")
    args = parser.parse_args(argv)
    try:
        table = read_rollouts(args.rollouts)
        diagnosis = diagnose(table, args.group, args.reward, args.step, w_max=args.w_max,
                             static_weights=args.static_weights, sparse_ratio=args.sparse_ratio)
    except DiagnoseError as error:
        parser.exit(2, f"dara diagnose: error: {error}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv_atomic(args.out / "diagnostics.csv", diagnosis.table)
    write_text_atomic(args.out / "report.md",
                      report(diagnosis, str(args.rollouts), args.group, args.step, args.sparse_ratio))
    source = str(Path(*Path(args.rollouts).parts[-4:]))  # enough of the path to name the run
    figure(diagnosis, args.out / "diagnostics.png", f"Reward density per step: {source}")
    verdicts = run_verdict(diagnosis.table)
    print(f"{diagnosis.rows} responses, {diagnosis.steps} step(s); share of steps each reward is sparse or inactive: "
          + ", ".join(f"{reward} {share:.0%}" for reward, share in verdicts.items()))
    print(f"wrote {args.out / 'diagnostics.csv'}, {args.out / 'report.md'}, {args.out / 'diagnostics.png'}")


if __name__ == "__main__":
    main()
