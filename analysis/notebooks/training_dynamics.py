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
# # Training dynamics: why a sparse reward learns late, and what DARA changes
#
# This notebook opens the training runs of one scale (`results/<scale>/runs/.../metrics.parquet`) and redraws
# the main dynamics figures with the same library code the pipeline uses (`dara.analysis`).
# Set `DARA_RESULTS` to the results folder of a scale (default: `results/tiny` of this repository); run it after
# `snakemake --config scale=tiny` (or `scale=smoke` for a quick look at meaningless numbers).

# %%
import os
from pathlib import Path

import matplotlib.pyplot as plt

from dara.analysis import figures
from dara.analysis.config import load_analysis_config
from dara.analysis.crossing import crossing_records, crossing_summary, training_steps
from dara.analysis.run_tables import load_metrics, reward_names
from dara.analysis.tables import main_group_size

# JupyterLab starts a kernel in the notebook's folder, the tests in the repository root: find the root (the
# folder with the Snakefile) from either; a relative DARA_RESULTS is taken from the root too.
REPO = next(folder for folder in (Path.cwd(), *Path.cwd().parents) if (folder / "Snakefile").is_file())
RESULTS = REPO / os.environ.get("DARA_RESULTS", "results/tiny")
SCALE = RESULTS.name
CONFIG = load_analysis_config(REPO / "analysis/config.yaml", SCALE)  # with the scale's own analysis block
metrics = load_metrics(sorted(RESULTS.glob("runs/*/*/G*/seed*/metrics.parquet")))
runs = metrics[["task", "method", "G", "seed"]].drop_duplicates()
runs.groupby(["task", "G"]).size().rename("runs").to_frame()

# %% [markdown]
# ## Density: how many prompt groups carry a signal for each reward
#
# A group is *active* for a reward when its responses do not all score the same; the reward's density π is
# the fraction of active groups. A reward that almost no response earns (the tool-call format at the start)
# has a small π: GDPO's sum of per-reward z-scores then gives it a small share of the update. DARA weights
# it by `min(w_max, sqrt(π_ref / π))`.

# %%
tool = metrics[metrics["task"] == "toolcall"]
tool = training_steps(tool[tool["G"] == main_group_size(tool)])
figure, axes = figures.new_figure(3)
figures.plot_seed_bands(axes[0], tool, "reward/format")
figures.finish(axes[0], "training step", "format reward (batch mean)", "format reward", legend=False)
figures.plot_seed_bands(axes[1], tool, "density/format")
figures.finish(axes[1], "training step", "format density π", "density", legend=False)
figures.plot_seed_bands(axes[2], tool, "weight/format")
figures.finish(axes[2], "training step", "weight on format", "channel weight (1 = GDPO)")
figure.suptitle(f"toolcall: format reward, its density and its weight{figures.scale_note(CONFIG)}")
figure.tight_layout()

# %% [markdown]
# ## Every task: each reward's mean and density
#
# The same view for every task the scale trained (the pipeline writes these as `figures/dynamics_<task>`).

# %%
for task in sorted(metrics["task"].unique()):
    rows = metrics[metrics["task"] == task]
    rows = training_steps(rows[rows["G"] == main_group_size(rows)])
    names = [name for name in reward_names(rows) if name != "sum"]
    figure, axes = figures.new_figure(len(names), width_per_panel=2.8)
    for ax, name in zip(axes, names):
        figures.plot_seed_bands(ax, rows, f"density/{name}")
        figures.finish(ax, "training step", f"{name} density π", name, legend=ax is axes[-1])
    figure.suptitle(f"{task}: reward densities{figures.scale_note(CONFIG)}")
    figure.tight_layout()

# %% [markdown]
# ## When does the format reward reach 0.8?
#
# The paper counts the first training step with format >= 0.8 (unsmoothed), median over seeds: 14 (DARA-Asym),
# 19 (GDPO) and 34 (GRPO) steps at 1.5B. Here, as in every table of the study, the median is the Kaplan-Meier one
# (`km_median`): the first step by which half of the seeds crossed, a seed that never gets there censored at its
# last step.

# %%
records = crossing_records(tool, {"format": [0.8]})
crossing_summary(records)[["method", "G", "n_runs", "n_crossed", "km_median", "km_q25", "km_q75", "steps"]]

# %%
plt.close("all")
