"""Beyond the paper: the mechanism toy (dara.analysis.mechanism_toy). A Bernoulli policy with one dense reward and
one sparse reward (starting at 1 %) trained with each method's advantages; steps until the sparse
reward's success probability reaches 0.8, per method and group size (fixed 256 responses per step): the study's
median and interquartile range (Kaplan-Meier, a run that never reaches it censored at its last step:
dara.analysis.crossing). Runs in seconds; no model, no data. Output: results/<scale>/figures/toy.{png,pdf},
tables/toy.csv.
"""

import argparse
from pathlib import Path

import torch

from dara.analysis import figures, palette
from dara.analysis.config import load_analysis_config
from dara.analysis.crossing import crossing_summary, outcome_records
from dara.analysis.figures import save_figure
from dara.io import write_csv_atomic
from dara.analysis.mechanism_toy import steps_to_threshold


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", required=True, help="scale name or experiment yaml (its analysis block applies)")
    parser.add_argument("--config", default="analysis/config.yaml")
    parser.add_argument("--seeds", type=int, default=None, help="default: the config's toy.seeds")
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out_dir)
    toy = load_analysis_config(args.config, args.scale)["toy"]  # smoke shrinks it to check the code path
    seeds = args.seeds or toy["seeds"]
    group_sizes = tuple(toy["group_sizes"])
    steps = {} if toy["max_steps"] is None else {"max_steps": toy["max_steps"]}
    runs = steps_to_threshold(group_sizes=group_sizes, seeds=range(seeds), **steps)
    write_csv_atomic(out / "tables" / "toy.csv", runs)

    figure, axes = figures.new_figure(1, width_per_panel=4.2, height=3.0)
    ax = axes[0]
    summary = crossing_summary(outcome_records(runs), by=("method", "G"))
    last_step = float(runs["step"].max())
    for method in palette.ordered(summary["method"].unique()):
        rows = summary[summary["method"] == method].sort_values("G")
        # a quartile or median not reached by the last step is drawn there, its marker open
        median, low, high = (rows[column].fillna(last_step).to_numpy(float)
                             for column in ("km_median", "km_q25", "km_q75"))
        reached = rows["km_median"].notna().to_numpy()
        ax.errorbar(rows["G"], median, yerr=[median - low, high - median], color=palette.color(method),
                    marker=palette.marker(method), ms=4, lw=1.3, capsize=2, label=palette.label(method))
        if not reached.all():
            ax.plot(rows["G"].to_numpy()[~reached], median[~reached], palette.marker(method), mfc="white",
                    color=palette.color(method), ms=4, ls="none")
    ax.set_xscale("log", base=2)
    ax.set_xticks(group_sizes, [str(g) for g in group_sizes])
    figures.finish(ax, "group size G (responses per prompt)", "steps until sparse success ≥ 0.8",
                   f"Mechanism toy: median (Kaplan-Meier) and IQR over {seeds} seeds"
                   + ("" if runs["reached"].all() else f"\n{int((~runs['reached']).sum())} runs censored at their last step"))
    figure.tight_layout()
    save_figure(figure, out / "figures" / "toy")
    figures.close(figure)
    if not runs["reached"].all():
        print(f"{int((~runs['reached']).sum())} toy runs did not reach the threshold (censored)")


if __name__ == "__main__":
    main()
