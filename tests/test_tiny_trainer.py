"""The tiny RL trainer: one step writes the metrics schema, a killed run resumes to identical metrics."""

from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

import dara.tiny.trainer as trainer_module
from dara.experiments import default_settings
from dara.tiny.policy import (encode_prompts, generate, load_policy, policy_digest, rollout, save_policy,
                              token_logprobs)
from dara.runs import Run
from dara.tiny.trainer import TrainSettings, learning_rate, resolved_config, train
from dara.tiny.warmstart import warm_start
from experiment_defaults import small_warm_start

torch.set_num_threads(1)
ACT_OPTIONS = {"tag_rate": 0.5}


@pytest.fixture(scope="module")
def act_policy(tmp_path_factory):
    """A deliberately small and briefly trained act_critic policy (seconds, not minutes)."""
    path = tmp_path_factory.mktemp("policy") / "act_critic"
    settings = small_warm_start()
    report = warm_start("act_critic", ACT_OPTIONS, path, **settings)
    assert report["parameters"] < 1_000_000
    return path


def _run(results, **overrides):
    """A short act_critic run in the results tree ``results``; ``overrides`` set its settings or coordinates."""
    coordinates = {"method": "dara_sym", "group_size": 4, "seed": 0}
    settings = dict(default_settings(), task_options=ACT_OPTIONS, steps=4, responses_per_step=16, max_new_tokens=20,
                    prompt_pool=100, eval_every=2, state_every=2)
    for key, value in overrides.items():
        (coordinates if key in coordinates else settings)[key] = value
    return Run(scale="tiny", backend="tiny", task="act_critic", settings=settings, results=str(results), **coordinates)


def _train(policy, results, **overrides):
    """Train `_run(results, **overrides)` from ``policy``: its metrics frame and its folder."""
    run = _run(results, **overrides)
    return train(run, policy=str(policy), progress=False), Path(run.run_dir)


def test_one_step_writes_metrics_config_revision_and_checkpoints(act_policy, tmp_path):
    frame, folder = _train(act_policy, tmp_path, steps=1)
    saved = pd.read_parquet(folder / "metrics.parquet")
    pd.testing.assert_frame_equal(frame, saved)
    assert saved["step"].tolist() == [0]
    for name in ("accuracy", "admissible", "format"):
        for prefix in ("reward", "density", "weight", "active_groups", "energy_pos", "energy_neg"):
            assert f"{prefix}/{name}" in saved.columns
    for column in ("entropy", "response_length", "clip_fraction", "learning_rate", "seconds"):
        assert column in saved.columns and saved[column].notna().all()
    assert saved["kl"].isna().all()  # kl_coef 0: no reference forward, so no KL to log
    # every response of the step, its rewards in the order the batch means were taken from
    responses = pd.read_parquet(folder / "rollouts.parquet")
    assert len(responses) == 16 and responses["step"].eq(0).all()
    assert responses.groupby("group").size().eq(4).all()  # G = 4 responses per prompt
    for name in ("accuracy", "admissible", "format"):
        assert responses[name].mean() == pytest.approx(saved[f"reward/{name}"].iloc[0])
    assert responses["advantage"].abs().mean() == pytest.approx(saved["advantage_abs"].iloc[0], rel=1e-6)
    assert saved["reward/format"].between(-0.5, 0.0).all()
    # Parse failures, counted per step: accuracy and admissible are unread exactly where the tag is missing (-0.5).
    missing_tags = -saved["reward/format"].iloc[0] / 0.5 * 16
    assert saved["reward_parse_failures/accuracy"].iloc[0] == saved["reward_parse_failures/admissible"].iloc[0] == missing_tags
    assert saved["reward_parse_failures/format"].iloc[0] == 0.0
    assert 0.0 <= saved["density/format"].iloc[0] <= 1.0 and saved["weight/format"].iloc[0] >= 1.0
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["method"] == "dara_sym" and config["group_size"] == 4 and config["task_options"] == ACT_OPTIONS
    # the whole record: what decides the metrics (coordinates, every setting) and the policy, no bookkeeping switch
    run = _run(tmp_path, steps=1)
    assert config == {"task": "act_critic", "method": "dara_sym", "group_size": 4, "seed": 0, "warm_start": 0,
                      **{k: v for k, v in run.settings.items() if k not in ("wandb", "wandb_project")},
                      "static_weights": None, "policy_sha256": policy_digest(act_policy), "policy": str(act_policy)}
    revision = (folder / "git_revision.txt").read_text()
    assert revision.startswith("revision: ") and "dirty: " in revision
    for step in (0, 1):
        tokenizer, model = load_policy(folder / "checkpoints" / f"step{step}")
        assert model.config.model_type == "qwen2"
    # dara.io's temporary names (.<name>.<random>.tmp<suffix>) are all gone
    assert not [path for path in tmp_path.rglob("*") if ".tmp" in path.name or path.name.endswith(".old")]


def test_training_changes_the_policy(act_policy, tmp_path):
    _, folder = _train(act_policy, tmp_path, steps=2)
    before = load_policy(folder / "checkpoints" / "step0")[1].state_dict()
    after = load_policy(folder / "checkpoints" / "step2")[1].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def _killed_at_step_three(policy, results, monkeypatch, **overrides) -> dict[str, int]:
    """Train `_run(results, **overrides)` until it is killed in step 3 (after the state of step 2); the real
    advantage function is back in place afterwards. Returns the count of advantage calls until the kill (4)."""
    real = trainer_module.compute_advantages
    calls = {"n": 0}

    def dies_at_step_three(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_module, "compute_advantages", dies_at_step_three)
    with pytest.raises(KeyboardInterrupt):
        _train(policy, results, **overrides)
    monkeypatch.setattr(trainer_module, "compute_advantages", real)
    folder = Path(_run(results, **overrides).run_dir)
    assert not (folder / "metrics.parquet").exists()
    assert (folder / "state.pt").exists()
    return calls


@pytest.mark.parametrize("lr_warmup_updates, lr_schedule", [(0, "constant"), (5, "constant"), (2, "cosine")])
def test_a_killed_run_resumes_to_the_same_metrics(act_policy, tmp_path, monkeypatch, lr_warmup_updates, lr_schedule):
    """With a warm-up and a decay too: the schedule follows the update's number, which a resumed run recomputes."""
    schedule = {"lr_warmup_updates": lr_warmup_updates, "lr_schedule": lr_schedule}
    reference, uninterrupted = _train(act_policy, tmp_path / "uninterrupted", **schedule)
    calls = _killed_at_step_three(act_policy, tmp_path / "resumed", monkeypatch, **schedule)
    resumed_folder = Path(_run(tmp_path / "resumed").run_dir)
    resumed, _ = _train(act_policy, tmp_path / "resumed", **schedule)

    assert calls["n"] == 4  # the resumed run redid only steps 2 and 3, with the real function
    columns = [c for c in reference.columns if c != "seconds"]
    pd.testing.assert_frame_equal(reference[columns], resumed[columns])
    pd.testing.assert_frame_equal(pd.read_parquet(uninterrupted / "rollouts.parquet"),
                                  pd.read_parquet(resumed_folder / "rollouts.parquet"))
    # two updates a step: the learning rate of each step's last update, numbers 1, 3, 5, 7
    settings = TrainSettings.of(_run(tmp_path, **schedule))
    assert reference["learning_rate"].tolist() == pytest.approx([learning_rate(u, settings) for u in (1, 3, 5, 7)])
    if lr_schedule == "constant":
        peak = default_settings()["learning_rate"]
        assert reference["learning_rate"].tolist() == pytest.approx(
            [peak * min(1, u / lr_warmup_updates) if lr_warmup_updates else peak for u in (1, 3, 5, 7)])
    else:  # past the warm-up (update 1 is in it), each step's last update a lower rate than the one before
        rates = reference["learning_rate"].tolist()
        assert rates[0] < rates[1] and rates[1] > rates[2] > rates[3] > 0
    final_a = load_policy(uninterrupted / "checkpoints" / "step4")[1].state_dict()
    final_b = load_policy(resumed_folder / "checkpoints" / "step4")[1].state_dict()
    assert all(torch.equal(final_a[k], final_b[k]) for k in final_a)


def test_a_finished_job_keeps_no_resume_state(act_policy, tmp_path):
    """The states are for a killed job: a job of two runs (4 steps, a state every 2) deletes both once it is done."""
    runs = [_run(tmp_path, seed=seed) for seed in (0, 1)]
    trainer_module.main(["--run", *(run.to_json() for run in runs), "--policy", str(act_policy), "--no-progress"])
    for run in runs:
        assert (Path(run.run_dir) / "metrics.parquet").exists() and not (Path(run.run_dir) / "state.pt").exists()


def test_a_state_from_other_settings_is_not_resumed(act_policy, tmp_path, monkeypatch, capsys):
    """A killed run's state, then the run again with another learning rate (the workflow reruns a job whose settings
    changed): it trains from step 0, as a fresh run with the new settings, and says which setting differs."""
    fresh, _ = _train(act_policy, tmp_path / "fresh", learning_rate=0.5)
    _killed_at_step_three(act_policy, tmp_path / "rerun", monkeypatch)
    again, _ = _train(act_policy, tmp_path / "rerun", learning_rate=0.5)
    assert "other settings or another policy (learning_rate); training this run from step 0" in capsys.readouterr().err
    pd.testing.assert_frame_equal(fresh[_columns(fresh)], again[_columns(again)])


def test_a_state_from_another_warm_start_at_the_same_path_is_not_resumed(act_policy, tmp_path, monkeypatch, capsys):
    """The warm start retrained in place (same path, other weights) after a run was killed: the run's state belongs
    to the old policy, so the run starts over from the new one, and its config.yaml names the new policy's digest."""
    policy = tmp_path / "policy"
    tokenizer, model = load_policy(act_policy)
    save_policy(model, tokenizer, policy)
    _killed_at_step_three(policy, tmp_path / "rerun", monkeypatch)
    old_digest = policy_digest(policy)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)
    save_policy(model, tokenizer, policy)
    assert policy_digest(policy) != old_digest
    fresh, _ = _train(policy, tmp_path / "fresh")
    again, folder = _train(policy, tmp_path / "rerun")
    assert "another policy (policy_sha256); training this run from step 0" in capsys.readouterr().err
    pd.testing.assert_frame_equal(fresh[_columns(fresh)], again[_columns(again)])
    assert yaml.safe_load((folder / "config.yaml").read_text())["policy_sha256"] == policy_digest(policy)


def test_a_state_from_another_kernel_dispatch_is_not_resumed(act_policy, tmp_path, monkeypatch, capsys):
    """A killed run, then the job again under another pin (the workflow reruns a job whose pin changed): the state's
    rounding is not this process's, so the run starts over."""
    fresh, _ = _train(act_policy, tmp_path / "fresh")
    _killed_at_step_three(act_policy, tmp_path / "rerun", monkeypatch)
    real = trainer_module.dispatch
    monkeypatch.setattr(trainer_module, "dispatch", lambda: {**real(), "openblas_core": "another core"})
    again, _ = _train(act_policy, tmp_path / "rerun")
    assert "under another kernel dispatch" in capsys.readouterr().err
    pd.testing.assert_frame_equal(fresh[_columns(fresh)], again[_columns(again)])


def test_policy_digest_reads_the_policy_and_names_a_folder_that_is_not_one(act_policy, tmp_path):
    """The digest follows the defining files only: a record the warm start adds (warmstart.json) leaves it alone."""
    policy = tmp_path / "policy"
    tokenizer, model = load_policy(act_policy)
    save_policy(model, tokenizer, policy)
    digest = policy_digest(policy)
    (policy / "warmstart.json").write_text('{"seconds": 1.0}')
    assert policy_digest(policy) == digest
    (policy / "tokenizer_config.json").write_text((policy / "tokenizer_config.json").read_text() + " ")
    assert policy_digest(policy) != digest
    (policy / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="missing config.json"):
        policy_digest(policy)


def test_gd2po_and_static_methods_run(act_policy, tmp_path):
    frame, _ = _train(act_policy, tmp_path, steps=1, method="gd2po_hard")
    assert frame["loss_weight"].between(0, 1).all()
    frame, _ = _train(act_policy, tmp_path, steps=1, method="static_asym", static_weights=[1, 1, 5])
    assert frame["weight/format"].tolist() == [5.0]


@pytest.mark.parametrize("overrides, message", [
    ({"method": "dara"}, "unknown method"),
    ({"method": "static_sym"}, "static_weights"),
    ({"static_weights": [1, 2, 3]}, "static_weights"),
    ({"responses_per_step": 15}, "multiple of group_size"),
    ({"group_size": 1}, "group_size"),
    ({"lr_warmup_updates": -1}, "lr_warmup_updates"),
    ({"lr_schedule": "linear"}, "lr_schedule must be one of constant, cosine"),
    ({"responses_per_step": 12, "minibatches": 2}, "whole prompt groups"),  # 3 prompts of G = 4 in 2 minibatches
])
def test_bad_arguments_raise(overrides, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        TrainSettings.of(_run(tmp_path, **overrides))


def test_learning_rate_warms_up_linearly_over_the_first_updates(tmp_path):
    constant = TrainSettings.of(_run(tmp_path, learning_rate=0.01, lr_warmup_updates=0))
    assert [learning_rate(u, constant) for u in (0, 1, 5)] == [0.01] * 3
    warm = TrainSettings.of(_run(tmp_path, learning_rate=0.01, lr_warmup_updates=4))
    assert [learning_rate(u, warm) for u in range(7)] == pytest.approx([0, 0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
    assert learning_rate(2, warm) == warm.learning_rate / 2 and learning_rate(1000, warm) == warm.learning_rate


@pytest.mark.parametrize("warm_up", [0, 4])
def test_the_cosine_schedule_is_transformers_factor_for_factor(tmp_path, warm_up):
    """TRL's run of the same settings steps transformers' cosine schedule over max_steps = steps x minibatches
    updates: the tiny trainer's rates are its, bit for bit, from the warm-up to the last update (not yet 0)."""
    from transformers import get_cosine_schedule_with_warmup

    settings = TrainSettings.of(_run(tmp_path, learning_rate=0.01, lr_warmup_updates=warm_up, lr_schedule="cosine",
                                     steps=10, minibatches=2))
    updates = settings.steps * settings.minibatches
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=settings.learning_rate)
    schedule = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=warm_up, num_training_steps=updates)
    expected = []
    for _ in range(updates):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    ours = [learning_rate(u, settings) for u in range(updates)]
    assert ours == expected
    assert ours[warm_up] == settings.learning_rate and 0 < ours[-1] < settings.learning_rate / 100
    assert all(a > b for a, b in zip(ours[warm_up:], ours[warm_up + 1:]))


def test_a_constant_schedule_stays_out_of_the_runs_config(tmp_path):
    """Runs made before lr_schedule existed keep their config.yaml; a cosine run records it."""
    constant = _run(tmp_path, lr_schedule="constant")
    assert "lr_schedule" not in resolved_config(constant, TrainSettings.of(constant))
    assert resolved_config(constant, TrainSettings.of(constant)) == resolved_config(
        _run(tmp_path), TrainSettings.of(_run(tmp_path)))
    cosine = _run(tmp_path, lr_schedule="cosine")
    assert resolved_config(cosine, TrainSettings.of(cosine))["lr_schedule"] == "cosine"


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
    _, folder = _train(act_policy, tmp_path, steps=1, wandb=True)
    runs = list((folder / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))  # the offline log that `wandb sync` would upload


def _columns(frame):
    return [c for c in frame.columns if c != "seconds"]


@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_the_same_seed_gives_the_same_metrics_twice(act_policy, tmp_path, kl_coef):
    first, _ = _train(act_policy, tmp_path / "a", steps=3, kl_coef=kl_coef)
    second, _ = _train(act_policy, tmp_path / "b", steps=3, kl_coef=kl_coef)
    assert len(_columns(first)) > 20
    pd.testing.assert_frame_equal(first[_columns(first)], second[_columns(second)])  # every column, NaN == NaN
    other_seed, _ = _train(act_policy, tmp_path / "c", steps=3, kl_coef=kl_coef, seed=1)
    assert not first[_columns(first)].equals(other_seed[_columns(other_seed)])


def test_a_kl_penalty_logs_the_kl_to_the_warm_start(act_policy, tmp_path):
    frame, _ = _train(act_policy, tmp_path, steps=3, kl_coef=0.05)
    assert frame["kl"].notna().all() and (frame["kl"] > -1e-8).all()  # k3 >= 0, up to float32 rounding
    # Step 0's policy is the reference: only float rounding between the sampler's and a fresh forward remains.
    assert abs(frame["kl"].iloc[0]) < 1e-8 and frame["kl"].iloc[-1] > 1e-4


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.6, 0.95)])
def test_rollout_logprobs_are_those_of_a_fresh_forward(act_policy, temperature, top_p):
    """At any sampling temperature and top-p, the returned log-probs are the policy's own (temperature 1)."""
    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n", "You are in the kitchen. You see: mug.\nAssistant:\n"] * 8
    torch.manual_seed(0)
    batch = rollout(model, tokenizer, prompts, max_new_tokens=20, temperature=temperature, top_p=top_p)
    width = int(batch["prompt_length"])
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts)
    assert width == prompt_ids.shape[1] and torch.equal(batch["input_ids"][:, :width], prompt_ids)
    mask = batch["response_mask"].bool()
    assert torch.equal(batch["attention_mask"], torch.cat([prompt_mask, batch["response_mask"]], dim=1))
    fresh, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=width)
    assert batch["logprobs"].shape == fresh.shape == mask.shape
    assert (batch["logprobs"][mask] - fresh[mask]).abs().max() < 1e-5
    assert (batch["logprobs"][mask] < 0).all() and (batch["logprobs"][~mask] == 0).all()


@pytest.mark.parametrize("group_size", [2, 4])
def test_shared_prompt_logprobs_and_gradients_are_those_of_the_full_forward(act_policy, group_size):
    """Computing each group's prompt once (its keys and values repeated for the group's rows) gives the full
    forward's log-probs, entropies and parameter gradients, to float rounding, on left-padded prompts of different
    lengths."""
    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n", "You are in the big kitchen. You see: mug, key.\nAssistant:\n",
               "Hall.\nAssistant:\n", "You see: lamp.\nAssistant:\n"]
    torch.manual_seed(0)
    batch = rollout(model, tokenizer, [p for p in prompts for _ in range(group_size)], max_new_tokens=20)
    width = int(batch["prompt_length"])
    assert batch["attention_mask"][:, :width].sum(1).unique().numel() > 1  # prompts padded to one width
    mask = batch["response_mask"].bool()
    results = []
    for shared in (1, group_size):
        model.zero_grad()
        logp, entropy = token_logprobs(model, batch["input_ids"], batch["attention_mask"], with_entropy=True,
                                       start=width, prompt_group_size=shared)
        (logp * mask * torch.linspace(-1, 1, len(mask))[:, None]).sum().backward()
        results.append((logp, entropy, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full_logp, full_entropy, full_grads), (logp, entropy, grads) = results
    assert (full_logp - logp)[mask].abs().max() < 1e-5 and (full_entropy - entropy)[mask].abs().max() < 1e-5
    # a response of one token: the prefill's last position alone predicts it
    one = [token_logprobs(model, batch["input_ids"][:, :width + 1], batch["attention_mask"][:, :width + 1],
                          start=width, prompt_group_size=shared)[0] for shared in (1, group_size)]
    assert one[0].shape == (len(mask), 1) and (one[0] - one[1]).abs().max() < 1e-5
    for name, gradient in full_grads.items():
        assert gradient.abs().max() > 0, name
        # float rounding of sums in another order: far below the gradient's own scale
        assert (grads[name] - gradient).abs().max() <= 1e-5 * gradient.abs().max(), name


@pytest.mark.parametrize("group_size", [1, 4])
def test_scoring_only_response_tokens_gives_the_full_scoring_there(act_policy, group_size):
    """``scored`` (the trainer passes each row's response tokens up to EOS) runs the LM head and softmax on those
    positions only: there the log-probs, entropies and a masked loss's gradients are those of scoring every position,
    to float rounding; elsewhere log-prob and entropy are 0."""
    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n", "You are in the big kitchen. You see: mug, key.\nAssistant:\n"]
    torch.manual_seed(0)
    batch = rollout(model, tokenizer, [p for p in prompts for _ in range(4)], max_new_tokens=20)
    width = int(batch["prompt_length"])
    mask = batch["response_mask"].bool()
    assert (~mask).any() and mask.any(1).all()  # some rows end before others: padding to leave out
    results = []
    for scored in (None, mask):
        model.zero_grad()
        logp, entropy = token_logprobs(model, batch["input_ids"], batch["attention_mask"], with_entropy=True,
                                       start=width, prompt_group_size=group_size, scored=scored)
        (logp * mask * torch.linspace(-1, 1, len(mask))[:, None]).sum().backward()
        results.append((logp, entropy, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (full_logp, full_entropy, full_grads), (logp, entropy, grads) = results
    assert (full_logp[~mask] != 0).all() and (logp[~mask] == 0).all() and (entropy[~mask] == 0).all()
    assert (full_logp - logp)[mask].abs().max() < 1e-6 and (full_entropy - entropy)[mask].abs().max() < 1e-6
    for name, gradient in full_grads.items():
        assert gradient.abs().max() > 0, name
        assert (grads[name] - gradient).abs().max() <= 1e-5 * gradient.abs().max(), name
    with pytest.raises(ValueError, match="scored must be a bool mask of shape"):
        token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=width, scored=mask.float())
    with pytest.raises(ValueError, match="scored must be a bool mask of shape"):
        token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=width, scored=mask[:, 1:])


def test_shared_prompt_logprobs_refuse_rows_that_do_not_share_a_prompt(act_policy):
    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n", "Hall.\nAssistant:\n"] * 2  # groups of 2 are not one prompt
    torch.manual_seed(0)
    batch = rollout(model, tokenizer, prompts, max_new_tokens=8)
    with pytest.raises(ValueError, match="do not share their first"):
        token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=int(batch["prompt_length"]),
                       prompt_group_size=2)
    with pytest.raises(ValueError, match="does not divide"):
        token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=int(batch["prompt_length"]),
                       prompt_group_size=3)


def test_ppo_minibatches_hold_whole_prompt_groups(act_policy, tmp_path, monkeypatch):
    """A step's minibatches are whole groups (G consecutive rows of one prompt), shuffled, each row used once."""
    real_logprobs, real_rollout = trainer_module.token_logprobs, trainer_module.rollout
    batches, minibatches = [], []

    def records_the_batch(*args, **kwargs):
        batches.append(real_rollout(*args, **kwargs))
        return batches[-1]

    def records_the_minibatch(model, input_ids, attention_mask, *args, prompt_group_size=1, **kwargs):
        if torch.is_grad_enabled():  # the update's forward, not the reference's
            assert prompt_group_size == 4
            minibatches.append(input_ids)
        return real_logprobs(model, input_ids, attention_mask, *args, prompt_group_size=prompt_group_size, **kwargs)

    monkeypatch.setattr(trainer_module, "rollout", records_the_batch)
    monkeypatch.setattr(trainer_module, "token_logprobs", records_the_minibatch)
    _train(act_policy, tmp_path, steps=3, minibatches=2, kl_coef=0.05, responses_per_step=32)
    assert len(batches) == 3 and len(minibatches) == 6
    shuffled = []
    for batch, parts in zip(batches, zip(minibatches[::2], minibatches[1::2])):
        width = int(batch["prompt_length"])
        for part in parts:
            assert len(part) == 16
            prompts = part[:, :width].view(4, 4, -1)
            assert torch.equal(prompts, prompts[:, :1].expand_as(prompts))  # rows 4g..4g+3 share one prompt
        rows = torch.cat(parts)
        assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, batch["input_ids"].tolist()))  # each row once
        shuffled.append(not torch.equal(rows, batch["input_ids"]))
    assert any(shuffled)  # not the batch's own order


def test_rollout_ends_rows_at_eos_and_stops_when_all_have_ended(act_policy):
    tokenizer, model = load_policy(act_policy)
    torch.manual_seed(1)
    batch = rollout(model, tokenizer, ["You are in the hall.\nAssistant:\n"] * 32, max_new_tokens=64)
    response = batch["input_ids"][:, int(batch["prompt_length"]):]
    mask = batch["response_mask"].bool()
    is_eos = response == tokenizer.eos_token_id
    ended = is_eos.any(dim=1)
    assert ended.any()
    lengths = mask.sum(dim=1)
    for row in range(response.shape[0]):
        if ended[row]:  # kept up to and including the first EOS, padding after it
            first = int(is_eos[row].nonzero()[0])
            assert int(lengths[row]) == first + 1
            assert (response[row, first + 1:] == tokenizer.pad_token_id).all()
        else:
            assert int(lengths[row]) == response.shape[1] == 64
    assert response.shape[1] == int(lengths.max())  # no step after every row has ended


@pytest.mark.parametrize("temperature, other", [(1.0, 2.0), (2.0, 1.0)])
def test_rollout_samples_softmax_of_logits_over_temperature(act_policy, temperature, other):
    """The first token's empirical distribution over 20,000 draws is softmax(logits / T), not that of another T."""
    tokenizer, model = load_policy(act_policy)
    prompt = "You are in the hall. You see: mug, key.\nAssistant:\n"
    ids, attention = encode_prompts(tokenizer, [prompt])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[0, -1].double()
    expected, wrong = torch.softmax(logits / temperature, dim=-1), torch.softmax(logits / other, dim=-1)
    draws = 20_000
    torch.manual_seed(2)
    batch = rollout(model, tokenizer, [prompt] * draws, max_new_tokens=1, temperature=temperature)
    empirical = torch.bincount(batch["input_ids"][:, -1], minlength=expected.numel()).double() / draws
    # Three binomial standard deviations per token, summed: sampling noise stays well below it.
    tolerance = 0.5 * 3 * (expected * (1 - expected) / draws).sqrt().sum()
    assert 0.5 * (empirical - expected).abs().sum() < tolerance
    assert 0.5 * (empirical - wrong).abs().sum() > 2 * tolerance


def test_ppo_first_ratio_is_one_with_the_samplers_logprobs(act_policy, tmp_path, monkeypatch):
    """Before the first optimizer step the policy is the sampling policy: exp(logp - old_logp) is 1."""
    real = trainer_module.ppo_update
    seen = []

    def checks_the_ratio(model, optimizer, ref_logp, old_logp, batch, *args, **kwargs):
        width = int(batch["prompt_length"])
        with torch.no_grad():
            logp, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=width)
        mask = batch["response_mask"].bool()
        seen.append(float((torch.exp(logp - old_logp)[mask] - 1).abs().max()))
        assert model.training
        return real(model, optimizer, ref_logp, old_logp, batch, *args, **kwargs)

    monkeypatch.setattr(trainer_module, "ppo_update", checks_the_ratio)
    _train(act_policy, tmp_path, steps=2)
    assert len(seen) == 2 and max(seen) < 1e-5


@pytest.mark.parametrize("missing, message", [("rollouts", "predates rollouts.parquet"),
                                              ("minibatch_layout", "predates minibatches of whole prompt groups"),
                                              ("optimizer_kind", "predates the fused AdamW")])
def test_a_state_from_an_earlier_trainer_trains_the_run_from_step_0(act_policy, tmp_path, monkeypatch, capsys, missing,
                                                                   message):
    """A resume state without rollouts (written before rollouts.parquet), without the minibatch layout (written by the
    trainer that mixed prompts in a minibatch) or without the optimiser's kind (the unfused AdamW's) is not resumed:
    the run trains from step 0."""
    reference, fresh = _train(act_policy, tmp_path / "fresh")
    _killed_at_step_three(act_policy, tmp_path / "old", monkeypatch)
    old = Path(_run(tmp_path / "old").run_dir)
    state = torch.load(old / "state.pt", weights_only=False)
    del state[missing]  # as an earlier revision wrote it
    state["rows"] = [{**row, "reward/format": 123.0} for row in state["rows"]]  # resumed, these would be the metrics
    torch.save(state, old / "state.pt")
    again, _ = _train(act_policy, tmp_path / "old")
    assert message in capsys.readouterr().err
    columns = [c for c in reference.columns if c != "seconds"]
    pd.testing.assert_frame_equal(reference[columns], again[columns])
    assert pd.read_parquet(old / "rollouts.parquet")["step"].tolist() == pd.read_parquet(
        fresh / "rollouts.parquet")["step"].tolist()


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.6, 0.95)])
def test_rows_that_leave_the_decoder_change_no_draw(act_policy, monkeypatch, temperature, top_p):
    """The sampler drops ended rows from its decoder; with dropping switched off it draws the same tokens, and the
    log-probs differ only by float rounding."""
    import dara.tiny.policy as policy_module
    from dara.tiny.decoder import LeanDecoder

    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n", "You are in the kitchen. You see: mug.\nAssistant:\n"] * 16
    kept_rows = []
    real_select = LeanDecoder.select

    def counting_select(self, rows):
        if len(rows) < self.rows:  # a drop (the prompts' prefill is copied to their rows by a select too)
            kept_rows.append(len(rows))
        return real_select(self, rows)

    monkeypatch.setattr(LeanDecoder, "select", counting_select)
    torch.manual_seed(3)
    dropping = rollout(model, tokenizer, prompts, max_new_tokens=24, temperature=temperature, top_p=top_p)
    assert kept_rows and min(kept_rows) < len(prompts)  # rows did leave the decoder
    monkeypatch.setattr(policy_module, "ENDED_SHARE_TO_DROP", float("inf"))
    kept_rows.clear()
    torch.manual_seed(3)
    keeping = rollout(model, tokenizer, prompts, max_new_tokens=24, temperature=temperature, top_p=top_p)
    assert not kept_rows
    for key in ("input_ids", "attention_mask", "response_mask", "prompt_length"):
        assert torch.equal(dropping[key], keeping[key]), key
    assert (dropping["logprobs"] - keeping["logprobs"]).abs().max() < 1e-5


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.6, 0.95)])
def test_a_prompt_prefilled_once_for_its_group_draws_what_a_prefill_per_row_draws(act_policy, monkeypatch,
                                                                                  temperature, top_p):
    """Rows that repeat a prompt share one prefill (the decoder holds one row per distinct prompt until the copy);
    prefilling every row instead draws the same tokens, and the log-probs agree to float rounding."""
    import dara.tiny.policy as policy_module
    from dara.tiny.decoder import LeanDecoder

    tokenizer, model = load_policy(act_policy)
    # groups of 4 in the trainer's layout, prompts of unequal length (left padding), and one group split in two
    distinct = ["You are in the hall.\nAssistant:\n", "You are in the kitchen. You see: mug.\nAssistant:\n",
                "You are in the garden. You see: rose, spade.\nAssistant:\n"]
    prompts = [p for p in distinct for _ in range(4)] + [distinct[0]] * 2
    prefilled_rows = []
    real_init = LeanDecoder.__init__

    def recording_init(self, model, rows, capacity):
        prefilled_rows.append(rows)
        real_init(self, model, rows, capacity)

    monkeypatch.setattr(LeanDecoder, "__init__", recording_init)
    torch.manual_seed(7)
    shared = rollout(model, tokenizer, prompts, max_new_tokens=24, temperature=temperature, top_p=top_p)
    monkeypatch.setattr(policy_module, "_distinct_prompts",
                        lambda rows: (list(rows), torch.arange(len(rows))))  # every row its own prompt
    torch.manual_seed(7)
    per_row = rollout(model, tokenizer, prompts, max_new_tokens=24, temperature=temperature, top_p=top_p)
    assert prefilled_rows == [len(distinct), len(prompts)]
    assert shared["response_mask"].sum() > len(prompts)  # something was sampled
    for key in ("input_ids", "attention_mask", "response_mask", "prompt_length"):
        assert torch.equal(shared[key], per_row[key]), key
    assert (shared["logprobs"] - per_row["logprobs"]).abs().max() < 1e-5


def test_inference_mode_sampling_draws_what_no_grad_sampling_draws_and_returns_trainable_tensors(act_policy):
    """The sampler runs under inference mode for speed: the same tokens and log-probs bit for bit as the same loop
    under no_grad, and tensors that a training forward can differentiate through (an inference tensor saved for
    backward would raise)."""
    from dara.tiny.policy import _sample

    tokenizer, model = load_policy(act_policy)
    prompts = ["You are in the hall.\nAssistant:\n", "You are in the kitchen. You see: mug.\nAssistant:\n"] * 8
    torch.manual_seed(5)
    batch = rollout(model, tokenizer, prompts, max_new_tokens=20, temperature=0.6, top_p=0.95)
    torch.manual_seed(5)
    with torch.no_grad():
        reference = _sample(model, tokenizer, prompts, max_new_tokens=20, temperature=0.6, top_p=0.95)
    assert batch.keys() == reference.keys()
    for key, tensor in batch.items():
        assert not tensor.is_inference(), key
        assert torch.equal(tensor, reference[key]), key
    model.train()
    logp, _ = token_logprobs(model, batch["input_ids"], batch["attention_mask"], start=int(batch["prompt_length"]))
    ((logp - batch["logprobs"]) * batch["response_mask"]).sum().backward()
    assert model.model.embed_tokens.weight.grad is not None
