"""DARA inside TRL's GRPOTrainer (dara.trl): the advantages TRL trains on are compute_advantages' on the rewards TRL
logged; refused options and unscorable completions behave as documented; the CLI writes the tiny trainer's schema
for the tiny trainer's prompts; the backend comparison; the docs example runs as written."""

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

trl = pytest.importorskip("trl")

from dara.advantages import METHODS, compute_advantages  # noqa: E402
from dara.analysis.backend_pairs import compare_backends  # noqa: E402
from dara.experiments import load_experiment  # noqa: E402
from dara.runs import find_run  # noqa: E402
from dara.tiny.warmstart import warm_start  # noqa: E402
from dara.trl import DaraGRPOConfig, DaraGRPOTrainer, batch_advantages, process_slice  # noqa: E402
from experiment_defaults import small_warm_start  # noqa: E402
from run_records import write_run_record  # noqa: E402

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
G = 4
TOOLCALL_OPTIONS = {"format_rate": 0.3, "think_filler_max": 0}
STATIC = {"static_sym": [2.0, 1.0], "static_asym": [1.0, 3.0]}


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A deliberately small, briefly warm-started toolcall policy (seconds)."""
    path = tmp_path_factory.mktemp("policy") / "toolcall"
    warm_start("toolcall", TOOLCALL_OPTIONS, path, **small_warm_start(sft_steps=40, max_new_tokens=16))
    return path


# Two reward functions of different density on any text: a dense one and a sparse one.
def dense(completions, **kwargs):
    return [float(len(set(c)) % 3) for c in completions]


def sparse(completions, **kwargs):
    return [float(c.count("<") >= 2) for c in completions]


def _dataset(n_prompts=8):
    from datasets import Dataset
    from dara.tasks import get_task

    items = get_task("toolcall", **TOOLCALL_OPTIONS).items("train", n_prompts, seed=0)
    return Dataset.from_dict({"prompt": [item["prompt"] for item in items]})


def _trl_settings(output_dir) -> dict:
    """Two CPU steps of four prompts x G, every batch logged: TRL's settings of every trainer here."""
    return dict(output_dir=str(output_dir), num_generations=G, per_device_train_batch_size=4 * G,
                steps_per_generation=1, max_steps=2, max_completion_length=12, learning_rate=1e-3, use_cpu=True,
                bf16=False, gradient_checkpointing=False, report_to="none", logging_steps=1, save_strategy="no",
                disable_tqdm=True, seed=0)


def _config(tmp_path, **overrides):
    return DaraGRPOConfig(**{**_trl_settings(tmp_path / "out"), "dara_batch_norm": "token", **overrides})


class ProbedTrainer(DaraGRPOTrainer):
    """Records, per generation batch, the rewards TRL logged and the advantages it handed to the loss."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.batches, self.loss_advantages = [], []

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        logged = np.stack([np.asarray(self._logs["rewards"][name], dtype=float) for name in self.reward_func_names],
                          axis=1)
        lengths = output["completion_mask"].sum(dim=1)
        self.batches.append({"rewards": logged, "advantages": output["advantages"].clone(), "lengths": lengths,
                             "logged_advantages": np.asarray(self._logs["advantages"], dtype=float)})
        return output

    def _compute_loss(self, model, inputs):
        self.loss_advantages.append(inputs["advantages"].detach().clone())
        return super()._compute_loss(model, inputs)


def _trainer(policy, config, reward_funcs=(dense, sparse), cls=ProbedTrainer, n_prompts=8):
    from dara.tiny.policy import load_policy

    tokenizer, model = load_policy(policy)
    model.train()
    return cls(model=model, processing_class=tokenizer, reward_funcs=list(reward_funcs), args=config,
               train_dataset=_dataset(n_prompts))


@pytest.mark.parametrize("method", METHODS)
def test_two_steps_train_on_compute_advantages_of_the_logged_rewards(policy, tmp_path, method):
    config = _config(tmp_path, dara_method=method, dara_static_weights=STATIC.get(method))
    trainer = _trainer(policy, config)
    trainer.train()
    assert trainer.state.global_step == 2 and len(trainer.batches) == 2
    smallest_loss_weight = 1.0
    for batch, used in zip(trainer.batches, trainer.loss_advantages):
        rewards = batch["rewards"]
        assert rewards.shape == (4 * G, 2)
        expected = compute_advantages(method, rewards, np.arange(len(rewards)) // G, batch_norm="token",
                                      lengths=batch["lengths"].numpy(), static_weights=STATIC.get(method),
                                      channel_names=["dense", "sparse"])
        applied = (expected.advantages * expected.loss_weights).numpy()
        np.testing.assert_allclose(batch["advantages"].numpy(), applied, atol=1e-6)
        np.testing.assert_allclose(batch["logged_advantages"], applied, atol=1e-6)  # TRL's completions table
        # the loss saw the same advantages (TRL shuffles rows before the minibatch)
        np.testing.assert_allclose(np.sort(used.numpy()), np.sort(applied), atol=1e-6)
        assert np.abs(applied).max() > 0.1  # the rewards vary: a real signal, not zeros on both sides
        smallest_loss_weight = min(smallest_loss_weight, float(expected.loss_weights.min()))
    # GD2PO-Hard's kept fraction reached the loss (seed 0 samples sign conflicts); the others weigh every row 1
    assert (smallest_loss_weight < 1.0) == (method == "gd2po_hard")
    logged = [entry for entry in trainer.state.log_history if "dara/density/dense" in entry]
    assert len(logged) == 2  # one per generation batch, in TRL's own log (what report_to receives)
    for name in ("density/sparse", "weight/sparse", "active_groups/dense", "energy_pos/sparse", "n_groups",
                 "loss_weight", "advantage_abs", "unscorable_fraction"):
        assert f"dara/{name}" in logged[0]
    assert logged[0]["dara/n_groups"] == 4.0


def test_logged_dara_weights_follow_the_logged_densities(policy, tmp_path):
    trainer = _trainer(policy, _config(tmp_path, dara_method="dara_sym", max_steps=2))
    trainer.train()
    entries = [e for e in trainer.state.log_history if "dara/weight/sparse" in e]
    assert len(entries) == 2
    for entry in entries:
        density = {name: entry[f"dara/density/{name}"] for name in ("dense", "sparse")}
        for name, value in density.items():
            expected = 1.0 if value == 0 else min(5.0, math.sqrt(max(density.values()) / value))
            assert entry[f"dara/weight/{name}"] == pytest.approx(expected)
    assert max(entry["dara/weight/sparse"] for entry in entries) > 1.0  # seed 0: the sparse reward is up-weighted


def test_unscorable_completions_get_zero_advantage_and_stay_out_of_the_groups(policy, tmp_path):
    def sometimes_dense(completions, **kwargs):
        return [None if i % G == 0 else float(len(set(c)) % 3) for i, c in enumerate(completions)]

    def sometimes_sparse(completions, **kwargs):
        return [None if i % G == 0 else float(c.count("<") >= 3) for i, c in enumerate(completions)]

    config = _config(tmp_path, dara_method="dara_asym", max_steps=1, dara_batch_norm="response")
    trainer = _trainer(policy, config, reward_funcs=(sometimes_dense, sometimes_sparse))
    trainer.train()
    batch = trainer.batches[0]
    unscorable = np.isnan(batch["rewards"]).all(axis=1)
    assert unscorable.sum() == 4 and (batch["advantages"].numpy()[unscorable] == 0).all()
    kept = ~unscorable
    expected = compute_advantages("dara_asym", batch["rewards"][kept], (np.arange(4 * G) // G)[kept])
    np.testing.assert_allclose(batch["advantages"].numpy()[kept], expected.advantages.numpy(), atol=1e-6)
    entry = next(e for e in trainer.state.log_history if "dara/unscorable_fraction" in e)
    assert entry["dara/unscorable_fraction"] == 0.25


def test_a_reward_missing_for_only_some_functions_is_refused(policy, tmp_path):
    def partly_missing(completions, **kwargs):
        return [None if i == 5 else 1.0 for i, _ in enumerate(completions)]

    trainer = _trainer(policy, _config(tmp_path, dara_method="gdpo", max_steps=1), reward_funcs=(dense, partly_missing),
                       cls=DaraGRPOTrainer)
    with pytest.raises(ValueError, match=r"row 5: partly_missing returned None"):
        trainer.train()


def test_a_trl_other_than_the_tested_release_is_named_in_a_warning():
    import trl

    import dara.trl

    assert trl.__version__ == dara.trl.TRL_VERSION  # the pinned TRL (envs/trl.txt) is the tested one: no warning
    assert dara.trl.untested_trl(dara.trl.TRL_VERSION) is None
    message = dara.trl.untested_trl("1.17.0")
    assert "TRL 1.17.0 is untested" in message and "_calculate_rewards" in message and "1.16.0" in message


def test_importing_dara_trl_under_another_trl_warns(monkeypatch):
    import importlib
    import warnings

    import trl

    import dara.trl

    monkeypatch.setattr(trl, "__version__", "1.17.0")
    with pytest.warns(UserWarning, match="TRL 1.17.0 is untested"):
        importlib.reload(dara.trl)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the tested release: no warning
        importlib.reload(dara.trl)


def test_batch_advantages_nan_rows_and_lonely_survivors():
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0], [1.0, 1.0],
                            [float("nan")] * 2, [float("nan")] * 2, [float("nan")] * 2, [3.0, 0.0]])
    result = batch_advantages("gdpo", rewards, 4, channel_names=["a", "b"])
    # group 1 keeps one scorable completion: no baseline, advantage 0, left out of the density
    assert result.scored.tolist() == [True] * 4 + [False] * 4
    assert (result.advantages[4:] == 0).all() and result.metrics["n_groups"] == 1.0
    np.testing.assert_allclose(result.advantages[:4], compute_advantages("gdpo", rewards[:4], [0] * 4).advantages)
    everything_missing = batch_advantages("gdpo", torch.full((4, 2), float("nan")), 2, channel_names=["a", "b"])
    assert (everything_missing.applied == 0).all() and everything_missing.metrics["unscorable_fraction"] == 1.0


@pytest.mark.parametrize("rewards, groups, message", [
    (torch.zeros(10, 2), 4, "not whole groups of num_generations=4"),
    (torch.zeros(8, 2), 1, "at least two completions"),
    (torch.tensor([[1.0, float("inf")]] * 4), 2, "must be finite"),
    (torch.zeros(4, 3), 2, "3 reward columns"),
])
def test_batch_advantages_refuses_malformed_batches(rewards, groups, message):
    with pytest.raises(ValueError, match=message):
        batch_advantages("dara_sym", rewards, groups, channel_names=["a", "b"])


def test_every_process_keeps_its_slice_of_the_advantages_of_the_whole_batch():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.cat([torch.randint(0, 2, (16, 1), generator=generator).float() * (torch.arange(16)[:, None] < 4),
                         torch.randn(16, 1, generator=generator)], dim=1)
    whole = batch_advantages("dara_sym", rewards, 4, channel_names=["sparse", "dense"])
    slices = [whole.applied[process_slice(rank, 8, 16)] for rank in range(2)]
    torch.testing.assert_close(torch.cat(slices), whole.applied)
    # what each process would compute alone differs: density is a property of the whole batch
    alone = batch_advantages("dara_sym", rewards[8:], 4, channel_names=["sparse", "dense"])
    assert not torch.allclose(alone.applied, slices[1])
    with pytest.raises(ValueError, match="not a multiple"):
        process_slice(0, 6, 16)
    with pytest.raises(ValueError, match="process 2"):
        process_slice(2, 8, 16)


TWO_PROCESS_SCRIPT = """
import json, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from datasets import Dataset
from dara.tiny.policy import load_policy
from dara.trl import DaraGRPOConfig, DaraGRPOTrainer

policy, out = Path(sys.argv[1]), Path(sys.argv[2])

def dense(completions, **kwargs):
    return [float(len(set(c)) % 3) for c in completions]

def sparse(completions, **kwargs):
    return [float(c.count("<") >= 2) for c in completions]

class Recording(DaraGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        record = {"world": self.accelerator.num_processes, "gathered": self._dara_gathered_rewards.tolist(),
                  "local": output["advantages"].tolist(), "whole": self.dara_last.applied.tolist()}
        (out / f"rank{self.accelerator.process_index}.json").write_text(json.dumps(record))
        return output

tokenizer, model = load_policy(policy)
prompts = [f"Tools: weather(city, unit)\\nUser: Weather in city {i}?\\nAssistant:\\n" for i in range(8)]
config = DaraGRPOConfig(output_dir=str(out / "trl"), dara_method="dara_sym", num_generations=4,
                        per_device_train_batch_size=8, max_completion_length=12, max_steps=1, use_cpu=True,
                        bf16=False, report_to="none", disable_tqdm=True, save_strategy="no", seed=0)
Recording(model=model, processing_class=tokenizer, reward_funcs=[dense, sparse], args=config,
          train_dataset=Dataset.from_dict({"prompt": prompts})).train()
"""


@pytest.mark.slow
def test_two_real_processes_each_keep_their_slice_of_the_whole_batch(policy, tmp_path):
    """torchrun with two CPU processes (gloo): both see the same gathered rewards and whole-batch advantages,
    and rank r trains on rows [8r, 8r + 8) of them."""
    import json
    import os
    import socket
    import subprocess
    import sys

    script = tmp_path / "two_processes.py"
    script.write_text(TWO_PROCESS_SCRIPT)
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_port", str(port), str(script),
                             str(policy), str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["gathered"] == ranks[1]["gathered"] and len(ranks[0]["gathered"]) == 16
    assert ranks[0]["whole"] == ranks[1]["whole"]
    assert ranks[0]["local"] + ranks[1]["local"] == ranks[0]["whole"] != ranks[0]["local"] * 2
    expected = batch_advantages("dara_sym", torch.tensor(ranks[0]["gathered"]), 4, channel_names=["dense", "sparse"])
    np.testing.assert_allclose(ranks[0]["whole"], expected.applied.numpy(), atol=1e-6)


@pytest.mark.parametrize("overrides, message", [
    ({"reward_weights": [1.0, 2.0]}, "reward_weights=.*static_sym"),
    ({"scale_rewards": "batch"}, "scale_rewards='batch'"),
    ({"multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation"),
    ({"dara_method": "dara"}, "unknown; valid methods"),
    ({"dara_method": "static_sym"}, "dara_static_weights must be set"),
    ({"dara_static_weights": [2.0, 1.0]}, "dara_static_weights must be set"),
    ({"dara_base_weights": [1.0, 1.0]}, "DVAO"),
    ({"dara_batch_norm": "group"}, "dara_batch_norm"),
    ({"per_device_train_batch_size": 6}, r"divisible by num_generations \(4\)"),  # TRL's own check
    ({"num_generations": 1, "per_device_train_batch_size": 4}, "at least 2 generations"),
])
def test_refused_config_options(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, **overrides)


def test_options_that_need_the_reward_functions_are_checked_at_construction(policy, tmp_path):
    config = _config(tmp_path, dara_method="static_asym", dara_static_weights=[2.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=r"\['dense', 'sparse'\].*static_weights has 3 values"):
        _trainer(policy, config, cls=DaraGRPOTrainer)
    with pytest.raises(ValueError, match="distinct names"):
        _trainer(policy, _config(tmp_path), reward_funcs=(dense, dense), cls=DaraGRPOTrainer)
    from trl import GRPOConfig

    plain = GRPOConfig(output_dir=str(tmp_path / "plain"), num_generations=G, per_device_train_batch_size=G,
                       use_cpu=True, bf16=False, report_to="none")
    with pytest.raises(TypeError, match="needs a DaraGRPOConfig"):
        _trainer(policy, plain, cls=DaraGRPOTrainer)


def test_the_reference_model_computes_with_the_policys_gemm_library(tmp_path):
    """TRL loads its reference model from the policy's folder itself, past `load_policy`: a policy whose config names
    OpenBLAS (dara.tiny.gemm) must get a reference that multiplies with OpenBLAS too, or the KL term compares two
    libraries' rounding."""
    from torch import nn

    from dara.tiny.gemm import OpenBlasLinear
    from dara.tiny.policy import build_model, save_policy, train_tokenizer

    tokenizer = train_tokenizer(["call get_weather(city) with the city", "answer 12 + 3 = 15"] * 20, 300)
    model = build_model(len(tokenizer), hidden_size=32, intermediate_size=64, layers=1, matmul="openblas",
                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    save_policy(model, tokenizer, tmp_path / "policy")
    trainer = _trainer(tmp_path / "policy", _config(tmp_path, beta=0.5), cls=DaraGRPOTrainer)
    linear = [module for module in trainer.ref_model.modules() if isinstance(module, nn.Linear)]
    assert linear and all(type(module) is OpenBlasLinear for module in linear)


def _experiment(tmp_path) -> Path:
    experiment = {
        "scale": "trltest", "description": "two short toolcall runs", "backend": "tiny",
        "settings": {"steps": 2, "responses_per_step": 16, "max_new_tokens": 12, "temperature": 1.0,
                     "prompt_pool": 60, "w_max": 5.0, "batch_norm": "token", "learning_rate": 0.001,
                     "lr_warmup_updates": 3, "minibatches": 2, "clip_ratio": 0.2, "kl_coef": 0.0, "entropy_coef": 0.0, "max_grad_norm": 1.0,
                     "eval_every": 1, "state_every": 1, "wandb": False},
        "tasks": {"toolcall": {"options": TOOLCALL_OPTIONS}},
        "targets": {"toolcall": {"task": "toolcall", "methods": ["gdpo", "dara_asym"], "group_sizes": [G],
                                 "seeds": [0, 1]},
                    "trl": {"task": "toolcall", "backend": "trl", "methods": ["gdpo", "dara_asym"], "group_sizes": [G],
                            "seeds": [0, 1]}},
    }
    path = tmp_path / "trltest.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def test_cli_writes_the_tiny_trainers_schema_for_the_tiny_trainers_prompts(policy, tmp_path, monkeypatch):
    import dara.tiny.trainer as tiny
    import dara.trl.trainer as trl_trainer
    from dara.trl.train import main

    experiment = _experiment(tmp_path)
    trl_prompts, tiny_prompts = [], []
    real_rewards = trl_trainer.DaraGRPOTrainer._calculate_rewards

    def record_trl(self, inputs, prompts, completions, completion_ids_list):
        trl_prompts.append(list(prompts))
        return real_rewards(self, inputs, prompts, completions, completion_ids_list)

    real_rollout = tiny.rollout

    def record_tiny(model, tokenizer, prompts, **kwargs):
        tiny_prompts.append(list(prompts))
        return real_rollout(model, tokenizer, prompts, **kwargs)

    monkeypatch.setattr(trl_trainer.DaraGRPOTrainer, "_calculate_rewards", record_trl)
    monkeypatch.setattr(tiny, "rollout", record_tiny)
    monkeypatch.chdir(tmp_path)  # run folders are relative: results/<scale>/[trl/]runs/...
    loaded = load_experiment(experiment)
    trl_run = find_run(loaded, "toolcall", "dara_asym", G, 1, backend="trl")
    tiny_run = find_run(loaded, "toolcall", "dara_asym", G, 1, backend="tiny")
    assert trl_run.run_dir == f"results/trltest/trl/runs/toolcall/dara_asym/G{G}/seed1"
    main(["--experiment", str(experiment), "--run-dir", trl_run.run_dir, "--policy", str(policy), "--no-progress"])
    tiny.main(["--experiment", str(experiment), "--run-dir", tiny_run.run_dir, "--policy", str(policy),
               "--no-progress"])
    runs = Path(trl_run.run_dir).parent
    tiny_frame = pd.read_parquet(Path(tiny_run.run_dir) / "metrics.parquet")

    assert trl_prompts == tiny_prompts and len(trl_prompts) == 2  # same prompts, same order, groups of G
    trl_frame = pd.read_parquet(runs / "seed1" / "metrics.parquet")
    assert list(trl_frame.columns) == list(tiny_frame.columns)
    assert trl_frame["step"].tolist() == [0, 1]
    assert trl_frame["kl"].isna().all()  # kl_coef 0: TRL loads no reference model
    others = trl_frame.drop(columns=["kl"])
    assert others.notna().all().all()
    assert (trl_frame["reward/sum"] - trl_frame["reward/format"] - trl_frame["reward/correctness"]).abs().max() < 1e-5
    assert (trl_frame["n_groups"] == 16 / G).all() and (trl_frame["seconds"] > 0).all()
    # the same warm-up in both trainers: the last updates of the two steps are updates 1 and 3 of a 3-update ramp
    assert trl_frame["learning_rate"].tolist() == pytest.approx(tiny_frame["learning_rate"].tolist())
    assert tiny_frame["learning_rate"].tolist() == pytest.approx([0.001 / 3, 0.001])
    config = yaml.safe_load((runs / "seed1" / "config.yaml").read_text())
    assert config["backend"] == "trl" and config["method"] == "dara_asym" and config["trl"]["loss_type"] == "bnpo"
    assert config["trl"]["max_steps"] == 4 and config["trl"]["per_device_train_batch_size"] == 8
    assert config["trl"]["lr_scheduler_type"] == "constant_with_warmup" and config["trl"]["warmup_steps"] == 3
    assert (runs / "seed1" / "git_revision.txt").read_text().startswith("revision: ")
    assert sorted(p.name for p in (runs / "seed1" / "checkpoints").iterdir()) == ["step0", "step1", "step2"]
    assert not list((runs / "seed1").rglob("*.tmp*"))


@pytest.mark.parametrize("warmup, decay", [(0, "constant"), (4, "constant"), (0, "cosine"), (4, "cosine")])
def test_trl_config_maps_the_learning_rate_schedule_to_transformers_schedule(tmp_path, warmup, decay):
    """TRL's scheduler, built from the config as transformers' Trainer builds it, gives every optimizer update the
    learning rate the tiny trainer gives it (dara.tiny.trainer.learning_rate), its warm-up and its decay."""
    from transformers import (SchedulerType, get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup,
                              get_scheduler)

    from dara.experiments import default_settings
    from dara.runs import Run
    from dara.tiny.trainer import TrainSettings, learning_rate
    from dara.trl.train import trl_config

    run = Run(scale="trltest", backend="trl", task="toolcall", method="gdpo", group_size=G, seed=0,
              results=str(tmp_path), settings={**default_settings(), "task_options": TOOLCALL_OPTIONS, "steps": 5,
                                               "minibatches": 2, "learning_rate": 0.01, "lr_warmup_updates": warmup,
                                               "lr_schedule": decay})
    args = TrainSettings.of(run)
    config = trl_config(run, args, tmp_path / "trl", progress=False)
    assert SchedulerType(config.lr_scheduler_type).value == (
        "cosine" if decay == "cosine" else "constant_with_warmup" if warmup else "constant")
    assert config.warmup_steps == warmup and config.learning_rate == 0.01 and config.max_steps == 10
    expected = [learning_rate(update, args) for update in range(config.max_steps)]
    assert expected[:warmup + 1] == pytest.approx([0, 0.0025, 0.005, 0.0075, 0.01][-warmup - 1:])
    # the constant schedule stays at its peak to the last update; the cosine one has decayed below it
    assert (expected[-1] == 0.01) == (decay == "constant")

    def schedule(make):
        optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.learning_rate)
        scheduler = make(optimizer)
        rates = []
        for _ in range(config.max_steps):  # the Trainer's order: the update at the current lr, then the scheduler
            rates.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return rates

    assert schedule(lambda opt: get_scheduler(config.lr_scheduler_type, opt,
                                              num_warmup_steps=config.get_warmup_steps(config.max_steps),
                                              num_training_steps=config.max_steps)) == pytest.approx(expected)
    assert schedule(lambda opt: (get_cosine_schedule_with_warmup(opt, warmup, config.max_steps) if decay == "cosine"
                                 else get_constant_schedule_with_warmup(opt, warmup))) == pytest.approx(expected)


@pytest.mark.parametrize("kl_coef", [0.0, 0.5])
def test_trls_loss_as_configured_has_the_tiny_trainers_gradient(policy, tmp_path, kl_coef):
    """The same rollouts, advantages, sampling log-probs and reference log-probs, one minibatch: the loss TRL computes
    under dara.trl.train's config has the gradient of the tiny trainer's (dara.tiny.trainer.ppo_update), the KL term
    included (TRL 1.16's default weights that term by the importance ratio, which changes its gradient)."""
    import copy

    from datasets import Dataset

    from dara.experiments import default_settings
    from dara.runs import Run
    from dara.tasks import get_task
    from dara.tiny.policy import load_policy, rollout, token_logprobs
    from dara.tiny.trainer import TrainSettings, ppo_update
    from dara.trl.train import trl_config

    run = Run(scale="trltest", backend="trl", task="toolcall", method="gdpo", group_size=G, seed=0,
              results=str(tmp_path), settings={**default_settings(), "task_options": TOOLCALL_OPTIONS, "steps": 1,
                                               "responses_per_step": 4 * G, "minibatches": 1, "max_new_tokens": 12,
                                               "kl_coef": kl_coef, "lr_warmup_updates": 0, "max_grad_norm": 1e9})
    args = TrainSettings.of(run)
    tokenizer, model = load_policy(policy)
    _, reference = load_policy(policy)
    torch.manual_seed(0)
    with torch.no_grad():  # a reference away from the policy, so that the KL term and its gradient are not 0
        for parameter in reference.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    prompts = [item["prompt"] for item in get_task("toolcall", **TOOLCALL_OPTIONS).items("train", 4, seed=0)]
    batch = rollout(model, tokenizer, [prompt for prompt in prompts for _ in range(G)], max_new_tokens=12)
    width = int(batch["prompt_length"])
    with torch.no_grad():
        ref_logp, _ = token_logprobs(reference, batch["input_ids"], batch["attention_mask"], start=width)
    advantages = torch.randn(4 * G)

    tiny_model = copy.deepcopy(model)
    ppo_update(tiny_model, torch.optim.SGD(tiny_model.parameters(), lr=0.0), ref_logp if kl_coef else None,
               batch["logprobs"], batch, advantages, torch.ones(4 * G), args, group_size=G)

    trainer = DaraGRPOTrainer(model=copy.deepcopy(model), processing_class=tokenizer, reward_funcs=[dense, sparse],
                              args=trl_config(run, args, tmp_path / "trl", progress=False),
                              train_dataset=Dataset.from_dict({"prompt": prompts}))
    trainer.current_gradient_accumulation_steps = 1  # set by transformers' training loop, which this test skips
    inputs = {"prompt_ids": batch["input_ids"][:, :width], "prompt_mask": batch["attention_mask"][:, :width],
              "completion_ids": batch["input_ids"][:, width:], "completion_mask": batch["response_mask"],
              "advantages": advantages, "old_per_token_logps": batch["logprobs"], "ref_per_token_logps": ref_logp}
    trainer.model.zero_grad()
    trainer._compute_loss(trainer.model, inputs).backward()

    gradients = {name: parameter.grad for name, parameter in trainer.model.named_parameters()}
    assert kl_coef == 0 or float(torch.exp(ref_logp - batch["logprobs"]).sub(1).abs().max()) > 0.01
    for name, parameter in tiny_model.named_parameters():
        assert torch.allclose(gradients[name], parameter.grad, rtol=1e-4, atol=1e-7), name


def test_cli_refuses_mismatched_seeds_and_unknown_runs(policy, tmp_path):
    from dara.experiments import ExperimentError
    from dara.trl.train import main

    experiment = str(_experiment(tmp_path))
    with pytest.raises(SystemExit):  # a run of the tiny backend is not TRL's to train
        main(["--experiment", experiment, "--run-dir", f"results/trltest/runs/toolcall/gdpo/G{G}/seed0"])
    with pytest.raises(ExperimentError, match="G8"):
        main(["--experiment", experiment, "--run-dir", "results/trltest/trl/runs/toolcall/gdpo/G8/seed0"])
    with pytest.raises(ValueError, match="not a run folder"):
        main(["--experiment", experiment, "--run-dir", str(tmp_path / "a")])


def _write_run(root, method, seed, format_values):
    path = Path(root) / "toolcall" / method / "G8" / f"seed{seed}" / "metrics.parquet"
    write_run_record(path.parent, "toolcall", method, 8, seed)
    pd.DataFrame({"step": range(len(format_values)), "reward/format": format_values}).to_parquet(path)
    return path


def test_compare_backends_lines_up_runs_by_their_records(tmp_path):
    tiny = [_write_run(tmp_path / "tiny", "dara_sym", 0, [0.1, 0.5, 0.85, 0.9]),
            _write_run(tmp_path / "tiny", "gdpo", 0, [0.1, 0.2, 0.3, 0.4])]
    trl_paths = [_write_run(tmp_path / "trl", "dara_sym", 0, [0.2, 0.8, 0.7, 0.95])]
    frame = compare_backends({"tiny": tiny, "trl": trl_paths}, reward="format", threshold=0.8, final_window=2)
    by_method = frame.set_index("method")
    assert by_method.loc["dara_sym", "tiny/crossing_step"] == 2 and by_method.loc["dara_sym", "trl/crossing_step"] == 1
    assert by_method.loc["dara_sym", "trl/final"] == 0.95
    assert by_method.loc["dara_sym", "trl/final_mean"] == pytest.approx(0.825)
    assert not by_method.loc["gdpo", "tiny/crossed"] and np.isnan(by_method.loc["gdpo", "tiny/crossing_step"])
    assert np.isnan(by_method.loc["gdpo", "trl/final"])  # not run by TRL
    with pytest.raises(ValueError, match="no column 'reward/length'"):
        compare_backends({"tiny": tiny, "trl": trl_paths}, reward="length", threshold=0.8)
    with pytest.raises(ValueError, match="at least two backends"):
        compare_backends({"tiny": tiny}, reward="format", threshold=0.8)


@pytest.mark.parametrize("document, heading", [("docs/trl.md", "# Use DARA in TRL")])
def test_the_docs_example_runs_as_written(policy, tmp_path, monkeypatch, document, heading):
    text = (ROOT / document).read_text()
    text = text[text.index(heading):]
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert len(example.strip().splitlines()) <= 12
    (tmp_path / "results" / "tiny" / "policies" / "toolcall").mkdir(parents=True)
    (tmp_path / "results" / "tiny" / "policies" / "toolcall" / "warm_start0").symlink_to(policy)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(example, document, "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.global_step == trainer.args.max_steps
    assert any("dara/weight/tool_format" in entry for entry in trainer.state.log_history)


# Monitor mode: TRL's own trainer, its advantages untouched, with the density diagnostics logged.

def _plain_config(tmp_path, name, **overrides):
    return trl.GRPOConfig(**{**_trl_settings(tmp_path / name), **overrides})


def _recording(base):
    class Recording(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.advantages, self.rewards = [], []

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            self.advantages.append(output["advantages"].clone())
            self.rewards.append(np.stack([np.asarray(self._logs["rewards"][n], dtype=float)
                                          for n in self.reward_func_names], axis=1))
            return output
    return Recording


def test_the_monitor_leaves_trls_advantages_bit_identical_and_logs_the_diagnostics(policy, tmp_path):
    from dara.diagnose import batch_diagnostics
    from dara.trl import DensityMonitorGRPOTrainer

    plain = _trainer(policy, _plain_config(tmp_path, "plain"), cls=_recording(trl.GRPOTrainer))
    plain.train()
    monitored = _trainer(policy, _plain_config(tmp_path, "monitored", log_completions=True),
                         cls=_recording(DensityMonitorGRPOTrainer))
    monitored.train()
    assert len(plain.advantages) == len(monitored.advantages) == 2
    for a, b in zip(plain.advantages, monitored.advantages):
        assert torch.equal(a, b)
    assert any(bool(a.abs().max() > 0.1) for a in plain.advantages)  # TRL's own advantages carry a signal
    logged = [entry for entry in monitored.state.log_history if "dara_monitor/density/dense" in entry]
    assert len(logged) == 2
    for entry, rewards in zip(logged, monitored.rewards):
        expected = batch_diagnostics(rewards, np.arange(len(rewards)) // G, ["dense", "sparse"])
        for key in ("density/dense", "density/sparse", "dara_weight/sparse", "energy_share_grpo/sparse",
                    "energy_share_gdpo/dense", "energy_share_dara_asym/sparse"):
            assert entry[f"dara_monitor/{key}"] == pytest.approx(expected[key])
        assert entry["dara_monitor/scored_fraction"] == 1.0
    # TRL's logged completions (one parquet per logging step) read by `dara diagnose` give the same densities
    from dara.__main__ import main as dara_main

    out = tmp_path / "diagnosis"
    dara_main(["diagnose", str(tmp_path / "monitored" / "completions"), "--group", "prompt", "--reward", "dense",
               "--reward", "sparse", "--step", "step", "--out", str(out)])
    table = pd.read_csv(out / "diagnostics.csv").set_index(["step", "reward"])
    for step, entry in zip((1, 2), logged):
        assert table.loc[(step, "dense"), "density"] == pytest.approx(entry["dara_monitor/density/dense"])
        assert table.loc[(step, "sparse"), "energy_share_gdpo"] == pytest.approx(
            entry["dara_monitor/energy_share_gdpo/sparse"])


def test_monitor_metrics_leave_out_unscored_rows_and_lonely_groups():
    from dara.trl import monitor_metrics

    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [float("nan")] * 2, [1.0, 1.0],  # group 0: 3 scored
                            [float("nan")] * 2, [1.0, 0.0], [float("nan")] * 2, [float("nan")] * 2])  # group 1: 1
    found = monitor_metrics(rewards, 4, ["a", "b"])
    assert found["scored_fraction"] == 3 / 8 and found["groups"] == 1.0
    assert found["density/a"] == 1.0 and found["density/b"] == 1.0


def test_the_monitor_refuses_reward_functions_of_one_name_and_bad_options_at_construction(policy, tmp_path):
    from dara.trl import DensityMonitorGRPOTrainer

    with pytest.raises(ValueError, match="distinct names"):
        _trainer(policy, _plain_config(tmp_path, "twins"), reward_funcs=(lambda completions, **k: [0.0] * len(completions),
                                                                       lambda completions, **k: [1.0] * len(completions)),
                 cls=DensityMonitorGRPOTrainer)
    from dara.tiny.policy import load_policy

    tokenizer, model = load_policy(policy)
    with pytest.raises(ValueError, match="static_weights"):
        DensityMonitorGRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=[dense, sparse],
                                  args=_plain_config(tmp_path, "weights"), train_dataset=_dataset(),
                                  monitor_static_weights=[1.0])


def test_the_config_defaults_are_the_estimators_own():
    import dataclasses

    from dara.advantages import EstimatorOptions

    defaults = {f.name: f.default for f in dataclasses.fields(DaraGRPOConfig)}
    estimator = {f.name: f.default for f in dataclasses.fields(EstimatorOptions)}
    for option in ("w_max", "tau", "eps", "batch_norm", "static_weights", "base_weights"):
        assert defaults[f"dara_{option}"] == estimator[option], option
