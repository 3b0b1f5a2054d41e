"""dara.pilot: the calibration pilots' argument parsing, regime numbers and reuse of finished runs."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dara.analysis.late_run import late_run_numbers
from dara.pilot import _assignments, _finished_run, summarise_run, summary_table


def test_assignments_parse_yaml_scalars_and_refuse_a_missing_value():
    assert _assignments(["learning_rate=3e-4", "steps=30", "wandb=false", "batch_norm=token"], "--set") == {
        "learning_rate": 3e-4, "steps": 30, "wandb": False, "batch_norm": "token"}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        _assignments(["learning_rate"], "--set")


def _metrics():
    rows = []
    for step in range(8):
        rows.append({"step": step, "reward/format": 0.1 * step, "reward/correctness": -1.0 + 0.2 * step,
                     "density/format": 0.04 if step == 0 else 0.3, "density/correctness": 0.7,
                     "weight/format": 1.0, "weight/correctness": 1.0,  # as a GDPO run logs them
                     # GDPO's share of format energy: 3 / (3 + 27) = 0.1 at step 0, then 0.5
                     "energy_pos/format": 1.5 if step == 0 else 10.0, "energy_neg/format": 1.5 if step == 0 else 10.0,
                     "energy_pos/correctness": 13.5 if step == 0 else 10.0,
                     "energy_neg/correctness": 13.5 if step == 0 else 10.0,
                     "energy_pos_calibrated/format": 12.0, "energy_neg_calibrated/format": 12.0,
                     "energy_pos_calibrated/correctness": 12.0, "energy_neg_calibrated/correctness": 12.0,
                     "entropy": 0.2, "seconds": 0.4})
    return pd.DataFrame(rows)


def test_summarise_run_reads_the_regime_numbers():
    summary = summarise_run(_metrics(), ("format", "correctness"), [("format", 0.5), ("format", 0.65)], w_max=5.0)
    # DARA's weight at the step-0 densities, whatever the run trained with: sqrt(0.7 / 0.04), under the cap
    assert summary["density0/format"] == 0.04 and summary["weight0/format"] == pytest.approx((0.7 / 0.04) ** 0.5)
    assert summary["weight0/correctness"] == 1.0
    assert summarise_run(_metrics(), ("format", "correctness"), [], w_max=4.0)["weight0/format"] == 4.0
    assert summary["energy_share0/format"] == pytest.approx(0.1)
    assert summary["energy_share_first5/format"] == pytest.approx(0.5)  # median over steps 0-4
    assert summary["energy_share_calibrated0/format"] == pytest.approx(0.5)
    # two thresholds of one reward are two crossings; row 0 (before any update) does not count
    assert summary["crossing/format>=0.5"] == 5 and summary["crossing/format>=0.65"] == 7
    assert np.isnan(summarise_run(_metrics(), ("format",), [("format", 0.95)], w_max=5.0)["crossing/format>=0.95"])
    assert summary["last_step"] == 7  # where a crossing never reached is censored
    assert summary["mean_last/correctness"] == pytest.approx(0.4)
    # a step-0 screen (--set steps=1 writes row 0 only) has no training step: its crossing is not reached, not an error
    screen = summarise_run(_metrics().iloc[:1], ("format", "correctness"), [("format", 0.5)], w_max=5.0)
    assert np.isnan(screen["crossing/format>=0.5"]) and screen["last_step"] == 0


def test_the_late_run_numbers_read_the_last_third_and_weigh_only_active_steps():
    # 31 steps (0..30): the last third is steps 21..30. Length varies in 8 % of groups on odd steps, never on even
    # ones; correctness in 80 % throughout
    rows = [{"step": step, "reward/length": 0.3 + 0.02 * step, "reward/correctness": 0.6,
             "density/length": (0.08 if step % 2 else 0.0) if step > 20 else 0.9, "density/correctness": 0.8}
            for step in range(31)]
    frame = pd.DataFrame(rows)
    summary = late_run_numbers(frame, ("correctness", "length"), w_max=5.0)
    assert summary["density_last_third/length"] == pytest.approx(0.04)  # median of five 0.08 and five 0
    assert summary["active_last_third/length"] == pytest.approx(0.5)
    # DARA's weight where length varies: sqrt(0.8 / 0.08), not dragged to 1 by the steps where it multiplies zeros
    assert summary["weight_last_third/length"] == pytest.approx(10 ** 0.5)
    assert summary["weight_last_third/correctness"] == 1.0
    assert late_run_numbers(frame.iloc[:1], ("correctness", "length"), 5.0) == {}  # a screen has no last third


def test_the_summary_reads_the_middle_step_and_the_stable_crossing():
    # length climbs 0.02 a step from 0.3 and holds 1.0 from step 35 on; 60 steps. The 10-step trailing mean first
    # reaches 0.99 at step 44 (steps 35..44 all 1.0) and holds to 60 (44 + 16 < 20 more): pending; at 0.8 the
    # trailing mean of steps 21..30 is 0.8 + ... see the computed check below
    rows = [{"step": step, "reward/length": min(1.0, 0.3 + 0.02 * step), "density/length": 0.5, "entropy": 0.1,
             "seconds": 1.0, **{f"energy_{s}/length": 1.0 for s in ("pos", "neg", "pos_calibrated", "neg_calibrated")}}
            for step in range(61)]
    frame = pd.DataFrame(rows)
    summary = summarise_run(frame, ("length",), [], w_max=5.0, stable=[("length", 0.99), ("length", 0.8)])
    assert summary["mean_mid/length"] == pytest.approx(0.9)  # step 30
    assert np.isnan(summary["stable/length>=0.99"]) and summary["stable_status/length>=0.99"] == "pending"
    trailing = pd.Series(frame["reward/length"].to_numpy()[1:]).rolling(10).mean()
    expected = 1 + int(np.argmax(trailing.to_numpy() >= 0.8 - 1e-12))  # first step whose window mean reaches 0.8
    assert summary["stable/length>=0.8"] == expected and summary["stable_status/length>=0.8"] == "confirmed"


def test_a_finished_run_is_reused_only_with_the_same_settings(tmp_path):
    from dara.experiments import default_settings
    from dara.runs import Run
    from dara.tiny.trainer import TrainSettings, resolved_config

    run = Run(scale="tiny", backend="tiny", task="toolcall", method="gdpo", group_size=4, seed=0,
              results=str(tmp_path), settings={**default_settings(), "task_options": {}})
    from dara.tiny.policy import build_model, policy_digest, save_policy, train_tokenizer

    tokenizer = train_tokenizer(["call get_weather with city Paris"] * 4, vocab_size=300)
    save_policy(build_model(len(tokenizer), eos_token_id=tokenizer.eos_token_id), tokenizer, run.policy_dir)
    folder = Path(run.run_dir)
    folder.mkdir(parents=True)
    assert _finished_run(run) is None  # nothing there
    recorded = {**resolved_config(run, TrainSettings.of(run)), "policy_sha256": policy_digest(run.policy_dir),
                "policy": run.policy_dir}
    (folder / "config.yaml").write_text(yaml.safe_dump(recorded))
    assert _finished_run(run) is None  # no metrics: killed half-way
    _metrics().to_parquet(folder / "metrics.parquet")
    assert len(_finished_run(run)) == 8
    (folder / "config.yaml").write_text(yaml.safe_dump({**recorded, "learning_rate": 0.5}))
    assert _finished_run(run) is None  # another pilot's learning rate
    (folder / "config.yaml").write_text(yaml.safe_dump({**recorded, "policy_sha256": "0" * 64}))
    assert _finished_run(run) is None  # trained from another warm start at the same path
    (folder / "config.yaml").write_text(yaml.safe_dump({**recorded, "lr_schedule": "cosine"}))
    assert _finished_run(run) is None  # a decaying rate, which a constant run's config leaves unsaid


def test_the_summary_gives_the_studys_median_of_crossing_steps(tmp_path):
    # four seeds: two cross at 10 and 30, two never within their 40 steps. Kaplan-Meier falls to 1/2 at 30 (numpy's
    # median with never as infinity would say "never"); three seeds of which one crosses: never
    pilot = tmp_path / "lr3e-4" / "pilot.csv"
    pilot.parent.mkdir()
    pd.DataFrame({"method": ["gdpo"] * 4 + ["grpo"] * 3, "seed": [0, 1, 2, 3, 0, 1, 2],
                  "crossing/format>=0.8": [10, np.nan, 30, np.nan, 12, np.nan, np.nan],
                  "last_step": 40}).to_csv(pilot, index=False)
    table = summary_table([pilot])
    cells = {row[1]: row[3] for row in ([cell.strip() for cell in line.strip("|").split("|")]
                                        for line in table.splitlines()[2:])}
    assert cells == {"gdpo": "30", "grpo": "never"}
    # a pilot.csv from before last_step was written: its runs had one length, past every crossing
    pd.read_csv(pilot).drop(columns="last_step").to_csv(pilot, index=False)
    assert summary_table([pilot]) == table
