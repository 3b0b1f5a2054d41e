"""The tiny RL trainer: one step writes the metrics schema, a killed run resumes to identical metrics."""

import pandas as pd
import pytest
import torch
import yaml

import dara.tiny.trainer as trainer_module
from dara.tiny.policy import generate, load_policy
from dara.tiny.trainer import TrainArgs, train
from dara.tiny.warmstart import warm_start

torch.set_num_threads(1)
ACT_OPTIONS = {"tag_rate": 0.5}


@pytest.fixture(scope="module")
def act_policy(tmp_path_factory):
    """A deliberately small and briefly trained act_critic policy (seconds, not minutes)."""
    path = tmp_path_factory.mktemp("policy") / "act_critic"
    report = warm_start("act_critic", ACT_OPTIONS, path, vocab_size=400, corpus_items=200, sft_steps=60, sft_learning_rate=0.01,
                        sft_batch_size=16, probe_prompts=4, probe_group_size=4, max_new_tokens=20,
                        model={"hidden_size": 32, "layers": 1, "heads": 2, "kv_heads": 1, "intermediate_size": 64})
    assert report["parameters"] < 1_000_000
    return path


def _args(policy, out, **overrides):
    settings = dict(task="act_critic", method="dara_sym", policy=str(policy), out=str(out), group_size=4, seed=0,
                    task_options=ACT_OPTIONS, steps=4, responses_per_step=16, max_new_tokens=20, prompt_pool=100,
                    eval_every=2, state_every=2, progress=False)
    settings.update(overrides)
    return TrainArgs(**settings)


def test_one_step_writes_metrics_config_revision_and_checkpoints(act_policy, tmp_path):
    frame = train(_args(act_policy, tmp_path, steps=1))
    saved = pd.read_parquet(tmp_path / "metrics.parquet")
    pd.testing.assert_frame_equal(frame, saved)
    assert saved["step"].tolist() == [0]
    for name in ("accuracy", "admissible", "format"):
        for prefix in ("reward", "density", "weight", "active_groups", "energy_pos", "energy_neg"):
            assert f"{prefix}/{name}" in saved.columns
    for column in ("entropy", "response_length", "clip_fraction", "kl", "seconds"):
        assert column in saved.columns and saved[column].notna().all()
    assert saved["reward/format"].between(-0.5, 0.0).all()
    # Parse failures, counted per step: accuracy and admissible are unread exactly where the tag is missing (-0.5).
    missing_tags = -saved["reward/format"].iloc[0] / 0.5 * 16
    assert saved["reward_parse_failures/accuracy"].iloc[0] == saved["reward_parse_failures/admissible"].iloc[0] == missing_tags
    assert saved["reward_parse_failures/format"].iloc[0] == 0.0
    assert 0.0 <= saved["density/format"].iloc[0] <= 1.0 and saved["weight/format"].iloc[0] >= 1.0
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["method"] == "dara_sym" and config["group_size"] == 4 and config["task_options"] == ACT_OPTIONS
    revision = (tmp_path / "git_revision.txt").read_text()
    assert revision.startswith("revision: ") and "dirty: " in revision
    for step in (0, 1):
        tokenizer, model = load_policy(tmp_path / "checkpoints" / f"step{step}")
        assert model.config.model_type == "qwen2"
    assert not list(tmp_path.rglob("*.tmp"))


def test_training_changes_the_policy(act_policy, tmp_path):
    train(_args(act_policy, tmp_path, steps=2))
    before = load_policy(tmp_path / "checkpoints" / "step0")[1].state_dict()
    after = load_policy(tmp_path / "checkpoints" / "step2")[1].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_a_killed_run_resumes_to_the_same_metrics(act_policy, tmp_path, monkeypatch):
    reference = train(_args(act_policy, tmp_path / "uninterrupted"))

    real = trainer_module.compute_advantages
    calls = {"n": 0}

    def dies_at_step_three(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "compute_advantages", dies_at_step_three)
    with pytest.raises(KeyboardInterrupt):
        train(_args(act_policy, tmp_path / "resumed"))
    assert not (tmp_path / "resumed" / "metrics.parquet").exists()
    assert (tmp_path / "resumed" / "state.pt").exists()
    monkeypatch.setattr(trainer_module, "compute_advantages", real)
    resumed = train(_args(act_policy, tmp_path / "resumed"))

    assert calls["n"] == 4  # the resumed run redid only steps 2 and 3, with the real function
    columns = [c for c in reference.columns if c != "seconds"]
    pd.testing.assert_frame_equal(reference[columns], resumed[columns])
    final_a = load_policy(tmp_path / "uninterrupted" / "checkpoints" / "step4")[1].state_dict()
    final_b = load_policy(tmp_path / "resumed" / "checkpoints" / "step4")[1].state_dict()
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)


def test_resume_refuses_a_state_from_other_settings(act_policy, tmp_path):
    train(_args(act_policy, tmp_path, steps=2))
    with pytest.raises(ValueError, match="other settings"):
        train(_args(act_policy, tmp_path, steps=2, learning_rate=0.5))


def test_gd2po_and_static_methods_run(act_policy, tmp_path):
    frame = train(_args(act_policy, tmp_path / "gd2po", steps=1, method="gd2po_hard"))
    assert frame["loss_weight"].between(0, 1).all()
    frame = train(_args(act_policy, tmp_path / "static", steps=1, method="static_asym", static_weights=[1, 1, 5]))
    assert frame["weight/format"].tolist() == [5.0]


@pytest.mark.parametrize("overrides, message", [
    ({"method": "dara"}, "unknown method"),
    ({"method": "static_sym"}, "static_weights"),
    ({"static_weights": [1, 2, 3]}, "static_weights"),
    ({"responses_per_step": 15}, "multiple of group_size"),
    ({"group_size": 1}, "group_size"),
])
def test_bad_arguments_raise(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        _args("unused", tmp_path, **overrides)


def test_generate_is_reproducible_from_a_seed(act_policy):
    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n"] * 4
    first = generate(model, tokenizer, prompts, seed=3, max_new_tokens=8)
    assert first == generate(model, tokenizer, prompts, seed=3, max_new_tokens=8)
    assert all(n <= 8 for n in first[1])


def test_wandb_receives_the_metrics_offline_without_a_key(act_policy, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    train(_args(act_policy, tmp_path, steps=1, wandb=True))
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))  # the offline log that `wandb sync` would upload
