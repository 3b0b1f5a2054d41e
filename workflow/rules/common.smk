# Shared by every stage: the validated experiment of the chosen scale, the run matrix and every path.
# Stages append the files they contribute at this scale to ALL_OUTPUTS (the input of `rule all`).
import os
import sys

from dara.experiments import load_experiment, run_matrix

# Shell commands say `python`: make that the interpreter running Snakemake (e.g. .venv/bin/snakemake without an
# activated environment), so every stage runs in the environment that has dara installed.
shell.prefix(f'set -euo pipefail; export PATH="{os.path.dirname(sys.executable)}:$PATH"; ')

# load_experiment validates experiments/<scale>.yaml against src/dara/schemas/experiment.schema.json and
# names the offending key, before any rule is defined.
SCALE = str(config.get("scale", "tiny"))
EXPERIMENT = load_experiment(SCALE)
RESULTS = f"results/{SCALE}"
# Scales whose runs the tiny CPU trainer makes (paper scale trains with verl elsewhere).
TRAINS_HERE = EXPERIMENT.get("backend", "tiny") == "tiny"

ALL_OUTPUTS = []


def run_dir(task, method, group_size, seed, scale=SCALE):
    """A training run's folder: config.yaml, git_revision.txt, metrics.parquet, checkpoints/step{N}/."""
    return f"results/{scale}/runs/{task}/{method}/G{group_size}/seed{seed}"


def run_metrics(task, method, group_size, seed, scale=SCALE):
    """metrics.parquet of a run: written last, so it marks the run as complete."""
    return f"{run_dir(task, method, group_size, seed, scale)}/metrics.parquet"


def policy_dir(task, scale=SCALE):
    """A task's warm-start policy (tokenizer + model, save_pretrained) and its warmstart.json."""
    return f"results/{scale}/policies/{task}"


def target_runs(target=None):
    """Run specs (task, method, group_size, seed, settings, targets) of one target, or of all targets."""
    return run_matrix(EXPERIMENT, target)


def target_metrics(target=None):
    """metrics.parquet paths of a target's runs."""
    return [run_metrics(r["task"], r["method"], r["group_size"], r["seed"]) for r in target_runs(target)]


def train_jobs():
    """Runs grouped by (task, method, G): one training job trains all seeds of a group in one process."""
    groups = {}
    for r in target_runs():
        groups.setdefault((r["task"], r["method"], r["group_size"]), []).append(r["seed"])
    return [{"task": t, "method": m, "group_size": g, "seeds": sorted(s)} for (t, m, g), s in groups.items()]


def main_group_size(task):
    """The group size most of a task's runs use (ties: the smallest): tables and checkpoint figures show it."""
    sizes = [run["group_size"] for run in target_runs() if run["task"] == task]
    return min(set(sizes), key=lambda g: (-sizes.count(g), g))


# Paper scale (verl on a GPU cluster): runs, data and GPU resources per run, used by paper.smk's rules.
if SCALE == "paper":
    from dara.verl_plugin.launch import load_paper_experiment, paper_runs

    PAPER_EXPERIMENT = load_paper_experiment()
    PAPER_RUNS = {
        (r.run_task, r.method, str(r.group_size), str(r.seed)): r for r in paper_runs(PAPER_EXPERIMENT)
    }
    PAPER_DATA = PAPER_EXPERIMENT["settings"]["paper"]["data_dir"]

    def paper_run(wildcards):
        return PAPER_RUNS[(wildcards.run_task, wildcards.method, wildcards.group_size, wildcards.seed)]

    def paper_run_data(wildcards):
        dataset = paper_run(wildcards).settings["dataset"]
        return [f"{PAPER_DATA}/{dataset}/train.parquet", f"{PAPER_DATA}/{dataset}/test.parquet"]

    PAPER_PRIMARY = PAPER_EXPERIMENT["settings"]["paper"]["primary_models"]

    def primary_run_metrics(wildcards):
        model = PAPER_PRIMARY[wildcards.task]
        return f"{RESULTS}/runs/{wildcards.task}-{model}/{wildcards.method}/G{wildcards.group_size}/seed{wildcards.seed}/metrics.parquet"

    def paper_resource(name):
        def resource(wildcards):
            return paper_run(wildcards).resources[name]

        return resource

    def paper_gpus(wildcards):
        resources = paper_run(wildcards).resources
        return resources["gpus_per_node"] * resources["nodes"]
