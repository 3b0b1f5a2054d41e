"""verl file-logger JSONL -> the shared metrics.parquet schema."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dara.verl_backend.logs import convert_run_logs, metrics_frame, read_jsonl_logs


def record(step, **data):
    return json.dumps({"step": step, "data": data}) + "\n"


def training_record(step, fmt, density):
    return record(
        step,
        **{
            "training/global_step": step,
            "dara/reward/format": fmt,
            "dara/reward/correctness": -1.0 + step,
            "dara/density/format": density,
            "dara/density/correctness": 0.25,
            "dara/weight/correctness": 2.0,
            "dara/active_groups/format": 100.0,
            "dara/energy_pos/format": 3.5,
            "dara/n_groups": 512.0,
            "actor/entropy": 0.7,
            "response_length/mean": 210.0,
            "actor/pg_clipfrac": 0.01,
            "actor/ppo_kl": 0.5,  # old vs current policy: not the reference KL of the kl column
            "actor/reward_kl_penalty": 0.002,
            "timing_s/step": 80.0,
        },
    )


def test_attempts_merge_with_the_later_attempt_winning(tmp_path):
    logs = tmp_path / "verl_logs"
    logs.mkdir()
    (logs / "attempt1.jsonl").write_text(
        record(0, **{"val-core/rlla/reward/mean": 0.1})  # validation before training: the starting policy's, row 0
        + training_record(1, 0.1, 0.5)
        + training_record(2, 0.2, 0.5)
        + '{"step": 3, "data": {"dara/re'  # the job was killed mid-line
    )
    validation = {"val-core/rlla/format/mean@1": 0.85, "val-aux/rlla/correctness/mean@1": 1.5}
    (logs / "attempt2.jsonl").write_text(
        training_record(2, 0.3, 0.75).replace('{"training', json.dumps(validation)[:-1] + ', "training')
        + training_record(3, 0.4, 1.0)
    )
    out = tmp_path / "metrics.parquet"
    convert_run_logs(logs, ["format", "correctness"], out)
    frame = pd.read_parquet(out)
    # verl's steps 1-3 rolled out the policies after 0-2 updates: rows 0-2
    assert frame["step"].tolist() == [0, 1, 2]
    assert frame["verl/training/global_step"].tolist() == [1.0, 2.0, 3.0]
    assert frame["reward/format"].tolist() == [0.1, 0.3, 0.4]  # verl step 2 from the resumed attempt
    assert frame["density/format"].tolist() == [0.5, 0.75, 1.0]
    assert frame["reward/correctness"].tolist() == [0.0, 1.0, 2.0]
    row = frame.iloc[0]
    assert row["weight/correctness"] == 2.0 and row["active_groups/format"] == 100.0 and row["n_groups"] == 512.0
    assert row["entropy"] == 0.7 and row["response_length"] == 210.0 and row["clip_fraction"] == 0.01
    assert row["kl"] == 0.002 and row["seconds"] == 80.0
    assert row["verl/actor/entropy"] == 0.7  # every verl metric kept under its own name
    assert row["verl/val-core/rlla/reward/mean"] == 0.1  # validation before training joins the starting policy's row
    # the validation logged at verl step 2 ran after its update: the policy after 2 updates, row 2
    assert frame["val/format"].isna().tolist() == [True, True, False] and frame["val/format"].iloc[2] == 0.85
    assert frame["val/correctness"].iloc[2] == 1.5
    assert not list(tmp_path.glob(".metrics.parquet.*"))  # atomic write leaves no temporary file


def test_a_reward_never_logged_is_a_nan_column():
    frame = metrics_frame({1: {"training/global_step": 1}}, ["format", "think_length"])
    assert frame["reward/think_length"].isna().all() and frame["step"].tolist() == [0]


def test_a_broken_line_inside_a_log_is_an_error(tmp_path):
    path = tmp_path / "attempt1.jsonl"
    path.write_text("not json\n" + training_record(1, 0.1, 0.5))
    with pytest.raises(ValueError, match="attempt1.jsonl:1"):
        read_jsonl_logs([path])


def test_no_training_step_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no training step"):
        metrics_frame({0: {"val-core/x": 1.0}}, ["format"])
    with pytest.raises(FileNotFoundError):
        convert_run_logs(tmp_path, ["format"], tmp_path / "m.parquet")


def test_a_resumed_runs_validation_record_keeps_the_checkpoint_steps_training_metrics(tmp_path):
    """Resuming from the step-2 checkpoint, verl first logs validation only at step 2 (val_before_train): the policy
    after 2 updates, whose rollout verl step 3 logs, so both land in row 2."""
    logs = tmp_path / "verl_logs"
    logs.mkdir()
    (logs / "attempt1.jsonl").write_text(training_record(1, 0.1, 0.5) + training_record(2, 0.2, 0.5))
    (logs / "attempt2.jsonl").write_text(
        record(2, **{"val-core/rlla/format/mean@1": 0.9}) + training_record(3, 0.4, 1.0)
    )
    frame = convert_run_logs(logs, ["format", "correctness"], tmp_path / "metrics.parquet")
    assert frame["step"].tolist() == [0, 1, 2]
    assert frame["reward/format"].tolist() == [0.1, 0.2, 0.4]
    assert frame["val/format"].isna().tolist() == [True, True, False] and frame["val/format"].iloc[2] == 0.9


def test_the_last_policys_validation_has_no_rollout_row():
    """verl's last step validates the policy after every update, which no rollout sampled: no row (it stays in
    verl_logs/, and the evaluation stage evaluates that checkpoint)."""
    steps = {1: {"training/global_step": 1, "dara/reward/format": 0.2},
             2: {"training/global_step": 2, "dara/reward/format": 0.6, "val-core/rlla/format/mean@1": 0.7}}
    frame = metrics_frame(steps, ["format"])
    assert frame["step"].tolist() == [0, 1] and frame["reward/format"].tolist() == [0.2, 0.6]
    assert "val/format" not in frame.columns


def test_the_kl_column_is_the_kl_to_the_reference_policy_only():
    frame = metrics_frame({1: {"training/global_step": 1, "actor/ppo_kl": 0.5}}, ["format"])
    assert frame["kl"].isna().all() and frame["verl/actor/ppo_kl"].iloc[0] == 0.5
    frame = metrics_frame({1: {"training/global_step": 1, "actor/kl_loss": 0.01, "actor/ppo_kl": 0.5}}, ["format"])
    assert frame["kl"].iloc[0] == 0.01


def test_prefilter_metrics_become_columns_and_figures_prefer_them():
    from dara.analysis.run_tables import density_column, density_label
    from dara.verl_backend.logs import metrics_frame

    steps = {1: {"training/global_step": 1, "dara/density/length": 1.0, "dara/rollout_prefilter/density/length": 0.25,
                 "dara/rollout_prefilter/n_groups": 8}}
    frame = metrics_frame(steps, ["correctness", "length"])
    assert frame.loc[0, "rollout_prefilter/density/length"] == 0.25 and frame.loc[0, "density/length"] == 1.0
    assert density_column(frame, "length") == "rollout_prefilter/density/length"
    assert density_label(density_column(frame, "length")).endswith("before dynamic sampling")
    # runs without dynamic sampling (the tiny trainer, verl without filter_groups) show the batch's density
    assert density_column(frame.drop(columns="rollout_prefilter/density/length"), "length") == "density/length"
