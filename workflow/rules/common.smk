# Shared by every stage: the validated experiment of the chosen scale and its runs. Every path comes from the run
# layer (dara.runs: run folders, checkpoints, evaluations, policies); no rule writes a path pattern of its own.
# Stages append the files they contribute at this scale to ALL_OUTPUTS (the input of `rule all`).
import json
import os
import sys

from dara.devices import verl_device
from dara.experiments import load_experiment, warm_start_settings
from dara.kernels import PIN, shell_exports  # every job's CPU kernels pinned (docs/tiny_scale.md, "Machine dependence")
from dara.runs import evaluation_jobs, folder_patterns, most_common_group_size, run_matrix, training_jobs

# Shell commands say `python`: make that the interpreter running Snakemake (e.g. .venv/bin/snakemake without an
# activated environment), so every stage runs in the environment that has dara installed.
shell.prefix(f'set -euo pipefail; export PATH="{os.path.dirname(sys.executable)}:$PATH"; {shell_exports()}')

# load_experiment validates experiments/<scale>.yaml against src/dara/schemas/experiment.schema.json (naming the
# offending key) and fills in the schema's defaults, before any rule is defined.
# What the jobs load too (`--experiment`): a scale name, or the path of an experiment file.
EXPERIMENT_SOURCE = str(config.get("scale", "tiny"))
EXPERIMENT = load_experiment(EXPERIMENT_SOURCE)
SCALE = EXPERIMENT["scale"]
RESULTS = f"results/{SCALE}"
RUNS = run_matrix(EXPERIMENT)
# Runs of the scale's own backend make `rule all` and the analysis; a target trained by another backend (TRL at the
# CPU scales, the tiny trainer beside verl on CPU) is opt-in, run by its target name.
OWN_RUNS = [run for run in RUNS if run.backend == EXPERIMENT["backend"]]

ALL_OUTPUTS = []
# The pin as the torch jobs' params (warm starts, training, evaluation): another pin rounds differently, so changing
# it reruns every job whose numbers it decides (Snakemake's params rerun trigger), as a changed setting does.
KERNEL_PIN = json.dumps(PIN, sort_keys=True)


def target_runs(target=None):
    """Runs of one target (every target by default)."""
    return RUNS if target is None else run_matrix(EXPERIMENT, target)


def opt_in(run):
    """Whether only opt-in targets (targets.<name>.opt_in) ask for a run: it is then left out of `rule all` (`make
    reproduce`), run by its target's name, and its job's time is kept apart from make reproduce's
    (benchmarks/opt_in/)."""
    return all(EXPERIMENT["targets"][target].get("opt_in", False) for target in run.targets)


def main_group_size(task):
    """The group size most of a task's runs use (ties: the smallest): tables and checkpoint figures show it."""
    return most_common_group_size(run.group_size for run in OWN_RUNS if run.task == task)
