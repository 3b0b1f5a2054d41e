"""Figure building blocks: median-and-IQR bands over seeds, crossing markers, Kaplan-Meier steps.

Every figure uses :mod:`dara.analysis.palette`, labels its axes with units, carries a legend, and is
saved as PNG and PDF by :func:`save_figure` (atomically, through :mod:`dara.io`). Figures made from tiny-scale runs say so
in their title (``scale_note``) so they are never mistaken for the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never open a window (tests and Snakemake run headless)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from dara.analysis import palette  # noqa: E402
from dara.analysis.crossing import median_crossing_step  # noqa: E402
from dara.analysis.summary import seed_band  # noqa: E402
from dara.io import replace_atomically  # noqa: E402
from dara.analysis.kaplan_meier import kaplan_meier  # noqa: E402

plt.rcParams.update(
    {
        "font.size": 9,
        "axes.titlesize": 9,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "figure.dpi": 100,
    }
)


def scale_note(config: dict) -> str:
    """Suffix for titles from the resolved analysis config (`load_analysis_config`): figures of the paper's setting
    need none; a CPU scale's must not pass for the paper's."""
    if config["paper_setting"]:
        return ""
    return f"\n[{config['scale']} scale: tiny CPU tasks and policies, not the paper's setting]"


def new_figure(n_panels: int, width_per_panel: float = 3.2, height: float = 2.6):
    figure, axes = plt.subplots(1, n_panels, figsize=(width_per_panel * n_panels, height), squeeze=False)
    return figure, list(axes[0])


def plot_seed_bands(ax, metrics: pd.DataFrame, column: str, methods: Sequence[str] | None = None) -> list[str]:
    """One median line per method with its interquartile band over seeds; returns the methods drawn.

    ``metrics`` is a long frame with ``method``, ``seed``, ``step`` and ``column``.
    """
    if column not in metrics.columns:
        raise ValueError(f"no column {column!r} to plot; have {sorted(metrics.columns)}")
    band = seed_band(metrics, column, by=("method", "step"))
    drawn = []
    for method in palette.ordered(methods or band["method"].unique()):
        rows = band[band["method"] == method]
        if rows.empty:
            continue
        n_seeds = int(rows["n_seeds"].max())
        ax.plot(rows["step"], rows["median"], color=palette.color(method), lw=1.5,
                label=f"{palette.label(method)} (n={n_seeds})")
        ax.fill_between(rows["step"], rows["q25"], rows["q75"], color=palette.color(method), alpha=0.2, lw=0)
        drawn.append(method)
    return drawn


def plot_checkpoint_means(ax, evaluations: pd.DataFrame, column: str, percent: bool = True) -> list[str]:
    """Mean over seeds at each evaluated checkpoint, with +-1 SD error bars, one line per method."""
    if column not in evaluations.columns:
        raise ValueError(f"no column {column!r} in the evaluations; have {sorted(evaluations.columns)}")
    factor = 100.0 if percent else 1.0
    drawn = []
    for method in palette.ordered(evaluations["method"].unique()):
        rows = evaluations[evaluations["method"] == method].groupby("step")[column]
        mean, sd = rows.mean() * factor, rows.std(ddof=1).fillna(0.0) * factor
        ax.errorbar(mean.index, mean.values, yerr=sd.values, color=palette.color(method),
                    marker=palette.marker(method), ms=3.5, lw=1.3, capsize=2, label=palette.label(method))
        drawn.append(method)
    return drawn


def mark_crossings(ax, crossings: pd.DataFrame, y_of_step, last_step_of_method=None) -> None:
    """Markers at each method's median first-crossing step (the study's median, Kaplan-Meier:
    ``crossing.median_crossing_step``): filled where the median crossed, open at the last step where it did not
    (fewer than half of the seeds reached the threshold).

    ``crossings``: crossing records, rows with ``method``, ``step`` (NaN = never crossed) and ``last_step``.
    ``y_of_step(method, step)`` gives the marker height (usually the median curve's value there);
    ``last_step_of_method(method)`` where an open marker goes (default: the method's last step in ``crossings``).
    """
    if last_step_of_method is None:
        last_steps = crossings.groupby("method")["last_step"].max()
        last_step_of_method = lambda method: float(last_steps[method])  # noqa: E731
    for method in palette.ordered(crossings["method"].unique()):
        runs = crossings[crossings["method"] == method]
        median = median_crossing_step(runs["step"], runs["last_step"])
        if np.isfinite(median):
            ax.plot([median], [y_of_step(method, median)], marker=palette.marker(method), ms=6,
                    color=palette.color(method), mec="black", mew=0.6, ls="none")
        else:
            last = last_step_of_method(method)
            ax.plot([last], [y_of_step(method, last)], marker=palette.marker(method), ms=6, mfc="none",
                    color=palette.color(method), mew=1.2, ls="none")


def plot_kaplan_meier(ax, durations: pd.DataFrame) -> list[str]:
    """Kaplan-Meier step curves of the fraction of runs still below the threshold, one per method.

    ``durations``: rows with ``method``, ``duration`` (crossing or censoring step) and ``observed``.
    Censored runs are drawn as '+' ticks on their curve.
    """
    drawn = []
    for method in palette.ordered(durations["method"].unique()):
        rows = durations[durations["method"] == method]
        km = kaplan_meier(rows["duration"].to_numpy(), rows["observed"].to_numpy(bool))
        last = float(rows["duration"].max())
        times = np.append(km.times, max(last, km.times[-1]))
        survival = np.append(km.survival, km.survival[-1])
        ax.step(times, survival, where="post", color=palette.color(method), lw=1.5,
                label=f"{palette.label(method)} (n={km.n})")
        censored = rows.loc[~rows["observed"].astype(bool), "duration"].to_numpy(float)
        if len(censored):
            ax.plot(censored, [km.survival_at(t) for t in censored], "+", color=palette.color(method), ms=7)
        drawn.append(method)
    ax.set_ylim(-0.03, 1.03)
    return drawn


def method_legend(target, methods, **options) -> None:
    """One legend entry per method (palette colour and marker), for figures whose panels show different
    subsets of methods; ``target`` is an Axes or a Figure."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=palette.color(m), marker=palette.marker(m), lw=1.5, ms=5, label=palette.label(m))
               for m in palette.ordered(methods)]
    target.legend(handles=handles, frameon=False, **options)


def finish(ax, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True,
           legend_loc: str = "outside") -> None:
    """Axis labels, title and legend. The legend goes right of the axes by default (multi-panel figures put
    it on their last panel), or at a named location; never matplotlib's "best", slow with bands."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if legend and ax.get_legend_handles_labels()[0]:
        if legend_loc == "outside":
            ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        else:
            ax.legend(frameon=False, loc=legend_loc)


def close(figure) -> None:
    plt.close(figure)


def save_figure(figure, stem) -> list[Path]:
    """Save ``figure`` as ``stem.png`` (200 dpi) and ``stem.pdf``, each atomically; returns both paths."""
    stem = Path(stem)
    written = []
    for suffix, options in ((".png", {"dpi": 200}), (".pdf", {})):
        target = stem.parent / f"{stem.name}{suffix}"
        written.append(replace_atomically(
            target, lambda temporary, s=suffix, o=options: figure.savefig(temporary, format=s[1:], bbox_inches="tight", **o)))
    return written
