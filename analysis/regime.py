"""The regime each task trained in, and what training without signal did: results/<scale>/tables/regime.{csv,md}.

The numbers docs/tiny_scale.md ("Calibration") sets its criteria on, measured on the pipeline's own runs at each
task's main group size (medians over seeds):

- per reward at step 0 (the warm-start policy's first rollout batch): the active-group density, DARA's weight
  (DARA-Sym's runs) and GDPO's share of the advantage energy (GDPO's runs: the reward's sum of z^2 over all
  rewards'); GDPO's share is also given as the median over steps 0-4;
- per task, held-out correctness (``heldout_correctness`` in analysis/config.yaml, in %) of the base policy (step 0)
  and at the last checkpoint, per method, with the drift control (``shuffled``) among them: the control's
  difference from the base is the drift that training without signal causes. For the math task also the share of
  final answers that leave out the second step (``skipped_step``: the shortcut a length budget invites);
- per task, reward and method over the last third of each run (`dara.analysis.late_run`): the reward's density,
  the share of steps where it varies and DARA's weight there (over the steps where it varies; from each step's
  densities, so GDPO's runs show the weight DARA would give in GDPO's state), and the batch mean at the middle step:
  the paper's math mechanism (length sparse near saturation while correctness stays dense) is read here;
- per warm start, where a task's runs start from several: the same step-0 and held-out numbers for each.
"""

import numpy as np
import pandas as pd

from dara.advantages import energy_shares
from dara.analysis import palette
from dara.analysis.claims import warm_starts
from dara.analysis.cli import parse_inputs
from dara.analysis.late_run import late_run_numbers
from dara.analysis.run_tables import WARM_START
from dara.analysis.tables import main_group_size
from dara.experiments import default_settings
from dara.io import write_csv_atomic, write_text_atomic

CONTROL = "shuffled"
# DARA's cap in the late-run weights: the experiment schema's default, which every scale's experiment file keeps
# (paper.yaml and verl_cpu.yaml state it: 5, the paper's)
W_MAX = float(default_settings()["w_max"])
EARLY_STEPS = 4  # GDPO's share is also summarised over steps 0..EARLY_STEPS


def step0_rows(task: str, metrics: pd.DataFrame) -> list[dict]:
    group_size = main_group_size(metrics)
    runs = metrics[metrics["G"] == group_size]
    rewards = [c.split("/", 1)[1] for c in runs.columns if c.startswith("density/") and runs[c].notna().any()]
    first = runs[runs["step"] == 0]
    gdpo = runs[runs["method"] == "gdpo"]
    dara = first[first["method"] == "dara_sym"]
    early = gdpo[gdpo["step"] <= EARLY_STEPS]
    shares_first = energy_shares(gdpo[gdpo["step"] == 0], rewards)
    shares_early = energy_shares(early, rewards)
    rows = []
    for reward in rewards:
        early_by_seed = early.assign(share=shares_early[reward]).groupby("seed")["share"].median()
        rows.append({
            "task": task, "G": group_size, "reward": reward,
            "seeds": int(first["seed"].nunique()),
            "density_step0": float(first.drop_duplicates("seed")[f"density/{reward}"].median()),
            "dara_weight_step0": float(dara[f"weight/{reward}"].median()) if len(dara) else np.nan,
            "gdpo_energy_share_step0": float(shares_first[reward].median()) if len(gdpo) else np.nan,
            "gdpo_energy_share_steps0_4": float(early_by_seed.median()) if len(early_by_seed) else np.nan,
        })
    return rows


def control_rows(task: str, metrics: pd.DataFrame) -> list[dict]:
    """Each training reward's batch mean at step 0 and at the last step under the drift control and under GDPO
    (medians over seeds): the drift of tasks without a held-out evaluation shows here too."""
    group_size = main_group_size(metrics)
    runs = metrics[(metrics["G"] == group_size) & metrics["method"].isin([CONTROL, "gdpo"])]
    rewards = [c.split("/", 1)[1] for c in runs.columns
               if c.startswith("reward/") and c != "reward/sum" and runs[c].notna().any()]
    rows = []
    for method, method_runs in runs.groupby("method"):
        first = method_runs[method_runs["step"] == method_runs["step"].min()]
        last = method_runs[method_runs["step"] == method_runs.groupby("seed")["step"].transform("max")]
        for reward in rewards:
            rows.append({"task": task, "G": group_size, "method": method, "reward": reward,
                         "seeds": int(first["seed"].nunique()), "step0": float(first[f"reward/{reward}"].median()),
                         "last": float(last[f"reward/{reward}"].median())})
    return rows


def late_rows(task: str, metrics: pd.DataFrame, w_max: float) -> list[dict]:
    """Per method and reward, medians over seeds of each run's last-third numbers (`late_run_numbers`) and of its
    batch mean at the middle step (``last // 2``)."""
    group_size = main_group_size(metrics)
    runs = metrics[metrics["G"] == group_size]
    rewards = [c.split("/", 1)[1] for c in runs.columns if c.startswith("density/") and runs[c].notna().any()]
    per_run = []
    for (method, seed), run in runs.groupby(["method", "seed"]):
        run = run.sort_values("step")
        numbers = late_run_numbers(run, rewards, w_max)
        if not numbers:
            continue
        for reward in rewards:
            per_run.append({"method": method, "reward": reward, "mean_middle_step": numbers[f"mean_mid/{reward}"],
                            **{name: numbers[f"{name}/{reward}"] for name in
                               ("density_last_third", "active_last_third", "weight_last_third")}})
    if not per_run:
        return []
    frame = pd.DataFrame(per_run)
    rows = []
    for method in palette.ordered(frame["method"].unique()):
        for reward in rewards:
            own = frame[(frame["method"] == method) & (frame["reward"] == reward)]
            rows.append({"task": task, "G": group_size, "method": method, "reward": reward, "seeds": len(own),
                         **{column: float(own[column].median()) for column in
                            ("mean_middle_step", "density_last_third", "active_last_third", "weight_last_third")}})
    return rows


def heldout_rows(task: str, metric: str, evaluations: pd.DataFrame) -> list[dict]:
    column = metric
    if column not in evaluations.columns:
        raise SystemExit(f"no {column!r} in the evaluations of {task}")
    group_size = main_group_size(evaluations)
    runs = evaluations[evaluations["G"] == group_size]
    last = runs[runs["step"] == runs.groupby(["method", "seed"])["step"].transform("max")]
    first = runs[runs["step"] == 0]
    # each run against its own step 0 (its warm start's evaluation); the base shown weights each warm start alike
    own_base = first.set_index(["method", "seed"])[column].astype(float)
    base = 100 * float(first[column].astype(float).groupby(warm_starts(first)).mean().mean())
    rows = []
    skipped = "metrics/skipped_step" if "metrics/skipped_step" in runs.columns else None
    for method in palette.ordered(last["method"].unique()):
        finals = last[last["method"] == method]
        values = 100 * finals[column].astype(float)
        gains = values.to_numpy() - 100 * own_base.loc[list(zip(finals["method"], finals["seed"]))].to_numpy()
        row = {"task": task, "G": group_size, "metric": metric, "method": method, "seeds": len(values),
               "base": base, "final_median": float(values.median()), "final_min": float(values.min()),
               "final_max": float(values.max()), "median_minus_base": float(np.median(gains))}
        if skipped:
            row["skipped_step_base"] = 100 * float(runs.loc[runs["step"] == 0, skipped].mean())
            row["skipped_step_final"] = 100 * float(last.loc[last["method"] == method, skipped].median())
            # the most any of the method's runs skips (the criterion: no final answer skips a step)
            row["skipped_step_final_max"] = 100 * float(last.loc[last["method"] == method, skipped].max())
        rows.append(row)
    return rows


def warm_start_rows(task: str, metrics: pd.DataFrame | None, evaluations: pd.DataFrame | None,
                    metric: str) -> list[dict]:
    """The regime per warm start (`WARM_START`), for a task whose runs start from several: each reward's step-0
    density, DARA's weight and GDPO's energy share (medians over that warm start's runs at the main G), the base's
    held-out correctness (%) and each method's median final-minus-base on it. The criteria hold for the median warm
    start (the tables above pool them); this shows how far each warm start is from it."""
    frames = [frame for frame in (metrics, evaluations) if frame is not None]
    if not frames or any(WARM_START not in frame.columns for frame in frames) \
            or max(frame[WARM_START].nunique() for frame in frames) < 2:
        return []
    rows = []
    if metrics is not None:
        runs = metrics[metrics["G"] == main_group_size(metrics)]
        rewards = [c.split("/", 1)[1] for c in runs.columns if c.startswith("density/") and runs[c].notna().any()]
        for warm_start, own in runs[runs["step"] == 0].groupby(WARM_START):
            gdpo, dara = own[own["method"] == "gdpo"], own[own["method"] == "dara_sym"]
            shares = energy_shares(gdpo, rewards) if len(gdpo) else None
            for reward in rewards:
                rows.append({"task": task, WARM_START: int(warm_start), "quantity": f"{reward} density at step 0",
                             "value": float(own.drop_duplicates("seed")[f"density/{reward}"].median())})
                if len(dara):
                    rows.append({"task": task, WARM_START: int(warm_start),
                                 "quantity": f"DARA weight on {reward} at step 0",
                                 "value": float(dara[f"weight/{reward}"].median())})
                if shares is not None:
                    rows.append({"task": task, WARM_START: int(warm_start),
                                 "quantity": f"GDPO energy share of {reward} at step 0",
                                 "value": float(shares[reward].median())})
    if evaluations is not None and metric in evaluations.columns:
        runs = evaluations[evaluations["G"] == main_group_size(evaluations)]
        last = runs[runs["step"] == runs.groupby(["method", "seed"])["step"].transform("max")]
        for warm_start, own in runs.groupby(WARM_START):
            base = 100 * float(own.loc[own["step"] == 0, metric].mean())
            rows.append({"task": task, WARM_START: int(warm_start), "quantity": f"base {metric} (%)", "value": base})
            finals = last[last[WARM_START] == warm_start]
            for method in palette.ordered(finals["method"].unique()):
                values = 100 * finals.loc[finals["method"] == method, metric].astype(float)
                rows.append({"task": task, WARM_START: int(warm_start),
                             "quantity": f"{palette.label(method)} final minus base (points, median)",
                             "value": float(values.median()) - base})
    return rows


def warm_start_markdown(rows: list[dict]) -> list[str]:
    """One table per task: a row per quantity, a column per warm start and the median over them."""
    if not rows:
        return ["Every task's runs start from one warm start."]
    frame = pd.DataFrame(rows)
    text = []
    for task, own in frame.groupby("task", sort=False):
        table = own.pivot_table(index="quantity", columns=WARM_START, values="value", sort=False)
        table.columns = [f"warm start {column}" for column in table.columns]
        table["median"] = table.median(axis=1)
        text += [f"`{task}`:", "", table.reset_index().to_markdown(index=False, floatfmt=".3g"), ""]
    return text


def main(argv=None):
    inputs = parse_inputs(__doc__.splitlines()[0], argv)
    if inputs.metrics is None:
        raise SystemExit("regime needs --metrics")
    step0, heldout, control, late, per_warm_start = [], [], [], [], []
    for task, metric in inputs.config["heldout_correctness"].items():
        metrics = inputs.task_metrics(task)
        if metrics is not None:
            step0 += step0_rows(task, metrics)
            control += control_rows(task, metrics)
            late += late_rows(task, metrics, W_MAX)
        evaluations = inputs.task_evaluations(task)
        if evaluations is not None:
            heldout += heldout_rows(task, metric, evaluations)
        per_warm_start += warm_start_rows(task, metrics, evaluations, metric)
    if not step0:
        raise SystemExit(f"no runs of the configured tasks {list(inputs.config['heldout_correctness'])}")
    step0_frame, heldout_frame, control_frame = pd.DataFrame(step0), pd.DataFrame(heldout), pd.DataFrame(control)
    late_frame = pd.DataFrame(late)
    write_csv_atomic(inputs.tables / "regime.csv",
                     pd.concat([step0_frame.assign(table="step0"), heldout_frame.assign(table="heldout"),
                                control_frame.assign(table="training"), late_frame.assign(table="late_run"),
                                pd.DataFrame(per_warm_start).assign(table="warm_starts")], ignore_index=True))
    training_text = ["No drift-control runs."]
    if len(control_frame):
        shown = control_frame.assign(method=control_frame["method"].map(palette.label))
        training_text = [shown.drop(columns=["G"]).to_markdown(index=False, floatfmt=".3g")]
    late_text = ["No run long enough to have a last third."]
    if len(late_frame):
        shown = late_frame.assign(method=late_frame["method"].map(palette.label))
        late_text = [shown.drop(columns=["G"]).to_markdown(index=False, floatfmt=".3g")]
    heldout_text = ["No evaluations."]
    if len(heldout_frame):
        shown = heldout_frame.assign(method=heldout_frame["method"].map(palette.label))
        heldout_text = [shown.drop(columns=["G"]).to_markdown(index=False, floatfmt=".1f")]
    text = [
        f"# The regime of each task ({inputs.scale} scale)",
        "",
        "At each task's main group size G, medians over seeds. Step 0 is the warm-start policy's first rollout batch:",
        "density = share of groups in which the reward varies; DARA's weight from the DARA-Sym runs; GDPO's share of",
        "the advantage energy = the reward's sum of squared group z-scores over all rewards' (GDPO's runs), at step 0",
        f"and as the median over steps 0-{EARLY_STEPS}.",
        "",
        step0_frame.to_markdown(index=False, floatfmt=".3g"),
        "",
        "Held-out correctness in % (the metric named): base = the step-0 checkpoints (each warm start weighted alike),",
        "final = the last checkpoint, median_minus_base = the median over runs of each run's final minus its own",
        "warm start's base; skipped_step (the math task): the share of final answers that box a result without both",
        "steps, at step 0 and at the last checkpoint (the median run's, and the run with the most);",
        f"`{palette.label(CONTROL)}` trains on advantages that carry no signal, so its difference from the base is drift.",
        "",
        *heldout_text,
        "",
        "Training rewards (batch means) at step 0 and at the last step, the drift control beside GDPO:",
        "",
        *training_text,
        "",
        "## Late in the run",
        "",
        "Over each run's last third (steps after two thirds of its last), medians over seeds: the reward's density,",
        "the share of those steps where it varies in some group, and DARA's weight",
        f"min({W_MAX:g}, sqrt(max_j pi_j / pi_k)) from each step's densities, over the steps where it varies (at",
        "density 0 it multiplies zeros); for runs of other methods it is the weight DARA would give in their state.",
        "`mean_middle_step`: the batch mean at the run's middle step. In the paper's math runs correctness stays",
        "dense while length, near saturation, turns sparse and DARA's weight on it rises.",
        "",
        *late_text,
        "",
        "## Per warm start",
        "",
        "Where a task's runs start from several independent warm starts (the tables above pool them), each one's",
        "step-0 regime and held-out correctness, and the median over warm starts (which the calibration's criteria",
        "are read on):",
        "",
        *warm_start_markdown(per_warm_start),
    ]
    write_text_atomic(inputs.tables / "regime.md", "\n".join(text))


if __name__ == "__main__":
    main()
