"""One step convention in every backend's metrics.parquet: row ``step = s`` is the rollout sampled from the policy
after s updates (row 0: the starting policy), and ``checkpoints/step<s>`` is that policy. The tiny trainer and TRL
are checked by the weights that sampled each row's rollout; verl by the conversion of its logs (verl's step k ->
row k - 1; its end-to-end run: tests/test_verl_cpu_e2e.py), and the analysis refuses a verl file numbered the old
way."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from dara.experiments import default_settings
from dara.runs import VERL_STEP_COLUMN, Run, check_row_steps
from dara.tiny.policy import load_policy
from dara.tiny.warmstart import warm_start
from dara.verl_backend.logs import metrics_frame, rewrite_run_metrics
from dara.verl_plugin import policy_step
from experiment_defaults import small_warm_start

torch.set_num_threads(1)
TOOLCALL_OPTIONS = {"format_rate": 0.3, "think_filler_max": 0}


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A deliberately small, briefly warm-started toolcall policy (seconds)."""
    path = tmp_path_factory.mktemp("policy") / "toolcall"
    warm_start("toolcall", TOOLCALL_OPTIONS, path, **small_warm_start(sft_steps=40, max_new_tokens=16))
    return path


def _run(results: Path, backend: str, steps: int) -> Run:
    # a large, constant learning rate and an entropy bonus (a gradient even where every advantage is 0): every
    # update moves the weights, so a row sampled by another policy than its checkpoint's cannot match it
    settings = dict(default_settings(), task_options=TOOLCALL_OPTIONS, steps=steps, responses_per_step=16,
                    max_new_tokens=12, prompt_pool=60, minibatches=2, learning_rate=0.01, lr_warmup_updates=0,
                    kl_coef=0.0, entropy_coef=0.01, eval_every=1, state_every=1)
    return Run(scale="steps", backend=backend, task="toolcall", method="gdpo", group_size=4, seed=0,
               settings=settings, results=str(results))


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def _assert_sampled_by_checkpoints(run: Run, sampled: list[dict[str, torch.Tensor]], rows: list[int]) -> None:
    """The weights that sampled row s's rollout are checkpoints/step<s>, and they change from row to row."""
    assert len(sampled) == len(rows)
    for step, weights in zip(rows, sampled):
        _, checkpoint = load_policy(run.checkpoint_dir(step))
        for name, tensor in checkpoint.state_dict().items():
            assert torch.equal(tensor, weights[name]), (step, name)
    assert any(not torch.equal(sampled[0][name], sampled[1][name]) for name in sampled[0])


def test_the_tiny_trainers_row_s_is_the_rollout_of_the_policy_after_s_updates(policy, tmp_path, monkeypatch):
    import dara.tiny.trainer as tiny

    sampled, real_rollout = [], tiny.rollout

    def recording(model, *args, **kwargs):
        sampled.append(_weights(model))
        return real_rollout(model, *args, **kwargs)

    monkeypatch.setattr(tiny, "rollout", recording)
    run = _run(tmp_path, "tiny", steps=3)
    frame = tiny.train(run, policy=str(policy), progress=False)
    assert frame["step"].tolist() == [0, 1, 2]
    _assert_sampled_by_checkpoints(run, sampled, frame["step"].tolist())
    _, start = load_policy(policy)  # row 0: the warm start itself
    assert all(torch.equal(tensor, sampled[0][name]) for name, tensor in start.state_dict().items())


def test_trls_row_s_is_the_rollout_of_the_policy_after_s_rollout_steps(policy, tmp_path, monkeypatch):
    pytest.importorskip("trl")
    import dara.trl.trainer as trl_trainer
    from dara.trl.train import train

    sampled, batch_means, real_rewards = [], [], trl_trainer.DaraGRPOTrainer._calculate_rewards

    def recording(self, inputs, prompts, completions, completion_ids_list):
        sampled.append(_weights(self.model))  # no update between a generation and its scoring
        rewards = real_rewards(self, inputs, prompts, completions, completion_ids_list)
        batch_means.append(rewards.nanmean(dim=0).tolist())
        return rewards

    monkeypatch.setattr(trl_trainer.DaraGRPOTrainer, "_calculate_rewards", recording)
    run = _run(tmp_path, "trl", steps=2)
    frame = train(run, policy=str(policy), progress=False)
    assert frame["step"].tolist() == [0, 1]
    _assert_sampled_by_checkpoints(run, sampled, frame["step"].tolist())
    # and each row's rewards are those of that generation (format is the task's first reward)
    assert frame["reward/format"].tolist() == pytest.approx([means[0] for means in batch_means])


def test_trls_optimizer_steps_map_to_their_rollout():
    from dara.trl.train import rollout_step

    # two optimizer updates per rollout: updates 1-2 train on rollout 0, 3-4 on rollout 1
    assert [rollout_step(step, 2) for step in (1, 2, 3, 4, 5)] == [0, 0, 1, 1, 2]
    assert [rollout_step(step, 1) for step in (1, 2)] == [0, 1]
    with pytest.raises(ValueError, match="must be >= 1"):
        rollout_step(0, 2)


def test_verls_step_k_is_row_k_minus_1():
    assert [policy_step(step) for step in (1, 2, 20)] == [0, 1, 19]
    with pytest.raises(ValueError, match="start at 1"):
        policy_step(0)
    steps = {k: {"training/global_step": k, "dara/reward/format": k / 10} for k in (1, 2, 3)}
    frame = metrics_frame(steps, ["format"])
    assert frame["step"].tolist() == [0, 1, 2] and frame["reward/format"].tolist() == [0.1, 0.2, 0.3]
    assert (frame[VERL_STEP_COLUMN] == frame["step"] + 1).all()
    check_row_steps(frame, "converted")  # the converted frame passes its own check


def _verl_run_folder(root: Path, frame: pd.DataFrame | None = None) -> Path:
    """A verl_cpu run folder: the launcher's config.yaml and verl_logs/, and a metrics.parquet if given."""
    run_dir = root / "results" / "verl_cpu" / "runs" / "toolcall-tiny_tool" / "gdpo" / "G4" / "seed0"
    (run_dir / "verl_logs").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({
        "run": {"task": "toolcall", "model": "tiny_tool", "method": "gdpo", "group_size": 4, "seed": 0},
        "settings": {"reward_keys": ["format", "correctness"]}}))
    lines = [{"step": k, "data": {"training/global_step": k, "dara/reward/format": k / 10,
                                  "dara/reward/correctness": 0.0}} for k in (1, 2, 3)]
    (run_dir / "verl_logs" / "attempt1.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    if frame is not None:
        frame.to_parquet(run_dir / "metrics.parquet")
    return run_dir


def test_a_verl_file_numbered_as_verl_steps_is_refused_and_rewritten_from_its_logs(tmp_path):
    from dara.analysis.run_tables import load_metrics

    old = pd.DataFrame({"step": [1, 2, 3], "reward/format": [0.1, 0.2, 0.3], VERL_STEP_COLUMN: [1.0, 2.0, 3.0]})
    run_dir = _verl_run_folder(tmp_path, old)
    with pytest.raises(ValueError, match=r"seed0/metrics.parquet: its rows are numbered as verl numbers its steps"):
        load_metrics([run_dir / "metrics.parquet"])
    rewritten = rewrite_run_metrics(run_dir)
    assert rewritten["step"].tolist() == [0, 1, 2]
    loaded = load_metrics([run_dir / "metrics.parquet"])
    assert loaded["step"].tolist() == [0, 1, 2] and loaded["reward/format"].tolist() == [0.1, 0.2, 0.3]
    # the CPU trainers' frames carry no verl step and pass
    check_row_steps(pd.DataFrame({"step": [0, 1], "reward/format": [0.1, 0.2]}), "tiny")
    # a verl run's frame without verl's step numbers cannot be checked: refused, not passed
    pd.DataFrame({"step": [1, 2], "reward/format": [0.1, 0.2]}).to_parquet(run_dir / "metrics.parquet")
    with pytest.raises(ValueError, match="without verl's own step numbers"):
        load_metrics([run_dir / "metrics.parquet"])


def test_rewriting_needs_the_runs_record(tmp_path):
    run_dir = _verl_run_folder(tmp_path)
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"task": "toolcall"}))
    with pytest.raises(ValueError, match="records no settings.reward_keys"):
        rewrite_run_metrics(run_dir)
    (run_dir / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match="has no config.yaml"):
        rewrite_run_metrics(run_dir)
