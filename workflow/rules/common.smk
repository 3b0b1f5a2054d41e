# Shared by every stage: the validated experiment of the chosen scale, the run matrix and every path.
# Stages append the files they contribute at this scale to ALL_OUTPUTS (the input of `rule all`).
import os
import sys

from dara.experiments import load_experiment, run_matrix

# Shell commands say `python`: make that the interpreter running Snakemake (e.g. .venv/bin/snakemake without an
# activated environment), so every stage runs in the environment that has dara installed.
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])

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
