# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Held-out results, crossing steps as survival data, and the paper side by side
#
# Opens the evaluations (`results/<scale>/eval/.../step<N>.json`) and, where the pipeline wrote them, the tables
# under `results/<scale>/tables/`. Set `DARA_RESULTS` (default: `results/tiny` of this repository).

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from dara.analysis import figures
from dara.analysis.config import load_analysis_config
from dara.analysis.run_tables import load_evaluations, load_metrics
from dara.analysis.crossing import crossing_records, steps_never_after_last, survival_durations, training_steps
from dara.analysis.effect_size import bootstrap_median_difference
from dara.analysis.kaplan_meier import logrank_test
from dara.analysis.paper_reference import PaperReference
from dara.analysis.tables import main_group_size

# JupyterLab starts a kernel in the notebook's folder, the tests in the repository root: find the root (the
# folder with the Snakefile) from either; a relative DARA_RESULTS is taken from the root too.
REPO = next(folder for folder in (Path.cwd(), *Path.cwd().parents) if (folder / "Snakefile").is_file())
RESULTS = REPO / os.environ.get("DARA_RESULTS", "results/tiny")
SCALE = RESULTS.name
REFERENCE = REPO / os.environ.get("DARA_REFERENCE", "analysis/reference")
# The evaluation keys of the tables (analysis/config.yaml evaluation_metrics), so the figure shows what they show.
CONFIG = load_analysis_config(REPO / "analysis/config.yaml", SCALE)  # with the scale's own analysis block
TOOL_METRICS = CONFIG["evaluation_metrics"]["tool"]
evaluations = load_evaluations(sorted(RESULTS.glob("eval/*/*/G*/seed*/step*.json")))
metrics = load_metrics(sorted(RESULTS.glob("runs/*/*/G*/seed*/metrics.parquet")))

# %% [markdown]
# ## Held-out tool calling across checkpoints (Figure 2 analogue)
#
# The tiny evaluation scores every checkpoint on held-out BFCL-style cases; accuracy is the fraction of the cases
# that call a tool passing bfcl-eval's checker (the paper's categories leave out irrelevance), format the fraction
# of all cases passing the paper's format rule (the keys are `analysis/config.yaml`'s `evaluation_metrics.tool`).

# %%
tool = evaluations[evaluations["task"] == "toolcall"]
tool = tool[tool["G"] == main_group_size(tool)]
figure, axes = figures.new_figure(2)
for ax, (column, label) in zip(axes, [(TOOL_METRICS["average_accuracy"], "held-out tool accuracy (%)"),
                                      (TOOL_METRICS["average_format"], "held-out format (%)")]):
    figures.plot_checkpoint_means(ax, tool, column)
    figures.finish(ax, "training step (checkpoint)", label, legend=ax is axes[-1])
figure.suptitle(f"toolcall: checkpoint-wise held-out scores{figures.scale_note(CONFIG)}")
figure.tight_layout()

# %% [markdown]
# ## Time to format 0.8 as survival data
#
# Dropping the seeds that never reach the threshold (as a median over crossed seeds does) flatters a method
# whose slow seeds fail. Kaplan-Meier keeps them, censored at their last step.

# %%
train = training_steps(metrics[metrics["task"] == "toolcall"])
train = train[train["G"] == main_group_size(train)]
durations = survival_durations(crossing_records(train, {"format": [0.8]}))
figure, axes = figures.new_figure(1, width_per_panel=4.5, height=3.0)
figures.plot_kaplan_meier(axes[0], durations)
figures.finish(axes[0], "training step", "fraction of seeds with format < 0.8", "Kaplan-Meier")
figure.tight_layout()
gdpo = durations[durations["method"] == "gdpo"]
for method in ("dara_sym", "dara_asym"):
    runs = durations[durations["method"] == method]
    if len(runs) and len(gdpo):
        test = logrank_test(runs["duration"], runs["observed"], gdpo["duration"], gdpo["observed"])
        # how many steps faster, not only whether: never-crossing seeds count from their last step + 1
        effect = bootstrap_median_difference(steps_never_after_last(runs), steps_never_after_last(gdpo))
        print(f"{method} vs gdpo: median difference {effect.text()}; log-rank chi2={test.statistic:.3g}, "
              f"p={test.p_value:.3g}")

# %% [markdown]
# ## The paper's numbers beside ours
#
# `REPORT.md` holds the full comparison and the computed claims; the paper's crossing steps are data in
# `analysis/reference/`.

# %%
PaperReference(REFERENCE).crossing_medians("1.5B").rename("paper's median steps to cross, Kaplan-Meier (inf: never)")

# %%
claims = RESULTS / "tables" / "claims.csv"
if claims.is_file():
    display(pd.read_csv(claims)[["claim", "verdict", "median_difference", "mean_difference", "ci_low", "ci_high",
                                 "bound", "p_raw", "p_holm", "per_warm_start"]])
report = RESULTS / "REPORT.md"
if report.is_file():
    section = report.read_text().split("## Which claims our runs support")[-1].split("\n## ")[0]
    print(section.strip())
else:
    print(f"{report} not written yet: run `snakemake report_md --config scale={SCALE}`")

# %%
plt.close("all")
