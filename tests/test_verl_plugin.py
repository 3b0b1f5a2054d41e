"""The verl plugin driven through verl 0.9.1's own code on CPU: registration, the V1 advantage step, verl's gdpo."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

torch.set_num_threads(1)

verl = pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos, ray_trainer  # noqa: E402
from verl.trainer.ppo.v1 import trainer_base  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402

from dara.advantages import compute_advantages  # noqa: E402
from dara.verl_plugin import TRAINER_MODE, assert_registered  # noqa: E402
from dara.verl_plugin.estimators import ESTIMATORS, RESERVED_METRIC_WORDS, VERL_ESTIMATOR_NAMES  # noqa: E402
from dara.verl_plugin.trainer import DaraPPOTrainer, reward_extra_columns  # noqa: E402

KEYS = ("format", "correctness")


def test_import_verl_registers_every_estimator_and_the_trainer():
    assert_registered(require_trainer=True)
    for name, fn in ESTIMATORS.items():
        assert core_algos.get_adv_estimator_fn(name) is fn
    assert trainer_base.get_trainer_cls(TRAINER_MODE) is DaraPPOTrainer
    # our names never shadow verl's own estimators
    assert core_algos.get_adv_estimator_fn("gdpo") is core_algos.compute_gdpo_outcome_advantage
    assert set(VERL_ESTIMATOR_NAMES.values()).isdisjoint({e.value for e in core_algos.AdvantageEstimator})


def test_assert_registered_fails_loudly_when_an_estimator_is_missing(monkeypatch):
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "dara_asym")
    with pytest.raises(RuntimeError, match="dara_asym"):
        assert_registered()


def test_the_trainer_refuses_to_start_on_a_half_registered_plugin(monkeypatch):
    """verl's own main_ppo with trainer_mode=dara_sync builds the trainer without our launcher's check: the trainer
    checks itself, before verl's constructor builds anything."""
    built = []
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    monkeypatch.setattr(PPOTrainerSync, "__init__", lambda self, *args, **kwargs: built.append(True))
    DaraPPOTrainer(config=None)
    assert built == [True]  # registered: verl's constructor runs
    monkeypatch.delitem(core_algos.ADV_ESTIMATOR_REGISTRY, "dara_sym")
    with pytest.raises(RuntimeError, match="dara_sym"):
        DaraPPOTrainer(config=None)
    assert built == [True]


# ---------------------------------------------------------------------------------------------------------------
# A batch as the V1 trainer holds it in TransferQueue: jagged response tensors, uid and extra_fields per sample.


@dataclass
class FakeBatchMeta:
    keys: list[str]
    partition_id: str = "train"
    tags: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


class FakeTransferQueue:
    """In-memory stand-in for `transfer_queue`'s kv API (the only part the advantage step uses)."""

    def __init__(self, fields: dict):
        self.fields = fields
        self.put: dict[str, torch.Tensor] = {}

    def kv_batch_get(self, keys, partition_id, select_fields):
        present = {name: self.fields[name] for name in select_fields if name in self.fields}
        return tu.get_tensordict(present)

    def kv_batch_put(self, keys, partition_id, fields):
        for name in fields.keys():
            self.put[name] = fields[name]
        return FakeBatchMeta(keys=list(keys), partition_id=partition_id)


def make_batch(rewards: np.ndarray, groups: int, lengths: list[int], keys=KEYS):
    n = rewards.shape[0]
    uids = [f"uid{i // (n // groups)}" for i in range(n)]
    mask = torch.nested.as_nested_tensor([torch.ones(l, dtype=torch.int64) for l in lengths], layout=torch.jagged)
    scores = []
    for i, l in enumerate(lengths):
        row = torch.zeros(l)
        row[-1] = float(rewards[i].sum())  # verl puts the score on the last valid token
        scores.append(row)
    rm_scores = torch.nested.as_nested_tensor(scores, layout=torch.jagged)
    extra = [{"reward_extra_info": {k: float(rewards[i, j]) for j, k in enumerate(keys)}} for i in range(n)]
    fields = {"uid": uids, "response_mask": mask, "rm_scores": rm_scores, "extra_fields": extra}
    # keys as verl's agent loop writes them: {uid}_{session_id}_{index}, one output per session here
    return FakeBatchMeta(keys=[f"{u}_{i % (n // groups)}_0" for i, u in enumerate(uids)]), fields, uids


def make_trainer(estimator: str, **dara) -> DaraPPOTrainer:
    trainer = object.__new__(DaraPPOTrainer)  # the advantage step only reads the config
    trainer.config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": estimator,
                "use_kl_in_reward": False,
                "kl_penalty": "kl",
                "rollout_correction": None,
                "gamma": 1.0,
                "lam": 1.0,
                "dara": {"reward_keys": list(KEYS), **dara},
            },
            "actor_rollout_ref": {"rollout": {"n": 4}},
        }
    )
    return trainer


def run_step(monkeypatch, estimator, rewards, lengths, groups, **dara):
    meta, fields, uids = make_batch(rewards, groups, lengths)
    fake = FakeTransferQueue(fields)
    monkeypatch.setattr(trainer_base, "tq", fake)
    metrics: dict = {}
    make_trainer(estimator, **dara)._compute_advantage(meta, metrics)
    return fake.put, metrics, uids


def padded(nested: torch.Tensor) -> torch.Tensor:
    return nested.to_padded_tensor(0.0)


def broadcast(scalars: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    width = max(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).float()
    return scalars[:, None].float() * mask


@pytest.fixture
def sparse_batch():
    rng = np.random.default_rng(0)
    groups, g = 6, 4
    format_reward = (rng.random(groups * g) < 0.8).astype(float)
    format_reward[::g], format_reward[1::g] = 0.0, 1.0  # format varies in every group: the dense channel
    correctness = np.round(rng.uniform(-3, 3, groups * g) * 2) / 2
    correctness[: 2 * g] = 3.0  # two groups constant in correctness: a sparse channel
    lengths = list(rng.integers(2, 9, groups * g))
    return np.stack([format_reward, correctness], axis=1), lengths, groups


@pytest.mark.parametrize("method", ["dara_sym", "dara_asym", "gdpo", "static_asym", "dvao", "gd2po_hard", "shuffled"])
def test_v1_step_equals_compute_advantages_broadcast_over_tokens(monkeypatch, sparse_batch, method):
    rewards, lengths, groups = sparse_batch
    extra = {"static_weights": [1.0, 5.0]} if method == "static_asym" else {}
    put, metrics, uids = run_step(monkeypatch, VERL_ESTIMATOR_NAMES[method], rewards, lengths, groups, **extra)
    options = dict(channel_names=list(KEYS))
    if method != "dvao":
        options.update(batch_norm="token", lengths=lengths)
    if "static_weights" in extra:
        options["static_weights"] = extra["static_weights"]
    expected = compute_advantages(method, rewards, np.array(uids, dtype=object), **options)
    torch.testing.assert_close(padded(put["advantages"]), broadcast(expected.advantages, lengths))
    torch.testing.assert_close(padded(put["returns"]), padded(put["advantages"]))
    for name, value in expected.metrics.items():
        assert metrics[f"dara/{name}"] == pytest.approx(value)
    for position, key in enumerate(KEYS):
        assert metrics[f"dara/reward/{key}"] == pytest.approx(rewards[:, position].mean())
    for name in metrics:
        assert not any(word in name for word in RESERVED_METRIC_WORDS), name
    if method == "gd2po_hard":
        torch.testing.assert_close(padded(put["rollout_is_weights"]), broadcast(expected.loss_weights, lengths))
        assert metrics["dara/gd2po_hard/keep_ratio"] == pytest.approx(1 - expected.metrics["gd2po_hard/conflict_ratio"])
    else:
        assert "rollout_is_weights" not in put


def test_dara_upweights_the_sparse_channel_in_the_v1_step(monkeypatch, sparse_batch):
    rewards, lengths, groups = sparse_batch
    _, metrics, _ = run_step(monkeypatch, "dara_sym", rewards, lengths, groups)
    assert metrics["dara/density/correctness"] < metrics["dara/density/format"]
    assert metrics["dara/weight/correctness"] > 1.0
    assert metrics["dara/weight/format"] == pytest.approx(1.0)


def verl_gdpo(rewards: np.ndarray, lengths: list[int], uids: list[str]) -> torch.Tensor:
    """verl's own gdpo estimator on the DataProto the legacy trainer builds."""
    n, width, prompt_width = len(lengths), max(lengths), 3
    response_mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).to(torch.int64)
    attention_mask = torch.cat([torch.ones(n, prompt_width, dtype=torch.int64), response_mask], dim=1)
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.zeros(n, prompt_width, dtype=torch.int64),
            "attention_mask": attention_mask,
            "response_mask": response_mask,
            "token_level_rewards": torch.zeros(n, width),
        },
        non_tensors={"uid": np.array(uids, dtype=object), **{k: rewards[:, j] for j, k in enumerate(KEYS)}},
    )
    config = OmegaConf.create({"gdpo_reward_keys": list(KEYS), "norm_adv_by_std_in_grpo": True})
    data = ray_trainer.compute_advantage(data, adv_estimator="gdpo", config=config)
    return data.batch["advantages"]


def test_dara_with_w_max_one_equals_verls_own_gdpo(monkeypatch, sparse_batch):
    rewards, lengths, groups = sparse_batch
    put, metrics, uids = run_step(monkeypatch, "dara_sym", rewards, lengths, groups, w_max=1.0)
    assert metrics["dara/weight/correctness"] == 1.0
    torch.testing.assert_close(padded(put["advantages"]), verl_gdpo(rewards, lengths, uids), atol=2e-5, rtol=1e-5)
    # and with the default cap the two differ, because correctness is sparse here
    put, _, _ = run_step(monkeypatch, "dara_sym", rewards, lengths, groups)
    assert not torch.allclose(padded(put["advantages"]), verl_gdpo(rewards, lengths, uids), atol=1e-3)


def test_verls_legacy_step_cannot_feed_the_reward_columns_and_says_so():
    n = 8
    data = DataProto.from_dict(
        tensors={"token_level_rewards": torch.zeros(n, 3), "response_mask": torch.ones(n, 3, dtype=torch.int64)},
        non_tensors={"uid": np.array([f"u{i // 4}" for i in range(n)], dtype=object)},
    )
    config = OmegaConf.create({"dara": {"reward_keys": list(KEYS)}})
    with pytest.raises(RuntimeError, match="trainer_mode=dara_sync"):
        ray_trainer.compute_advantage(data, adv_estimator="dara_sym", config=config)


def test_missing_reward_key_names_the_key(monkeypatch, sparse_batch):
    rewards, lengths, groups = sparse_batch
    meta, fields, _ = make_batch(rewards, groups, lengths, keys=("format", "accuracy"))
    monkeypatch.setattr(trainer_base, "tq", FakeTransferQueue(fields))
    with pytest.raises(KeyError, match="correctness"):
        make_trainer("dara_sym")._compute_advantage(meta, {})


def test_settings_are_validated(monkeypatch, sparse_batch):
    rewards, lengths, groups = sparse_batch
    with pytest.raises(ValueError, match="w_maxx"):
        run_step(monkeypatch, "dara_sym", rewards, lengths, groups, w_maxx=2.0)
    with pytest.raises(ValueError, match="batch_norm"):
        run_step(monkeypatch, "dara_sym", rewards, lengths, groups, batch_norm="batch")
    with pytest.raises(ValueError, match="static_weights"):  # set but unused by this estimator: not ignored
        run_step(monkeypatch, "dara_sym", rewards, lengths, groups, static_weights=[1.0, 5.0])


def test_reserved_metric_words_are_refused_in_reward_keys(monkeypatch, sparse_batch):
    rewards, lengths, groups = sparse_batch
    trainer = make_trainer("dara_sym")
    trainer.config.algorithm.dara.reward_keys = ["format", "total_score"]
    meta, fields, _ = make_batch(rewards, groups, lengths, keys=("format", "total_score"))
    monkeypatch.setattr(trainer_base, "tq", FakeTransferQueue(fields))
    with pytest.raises(ValueError, match="total"):
        trainer._compute_advantage(meta, {})


def test_non_dara_estimators_go_through_verls_step(monkeypatch, sparse_batch):
    rewards, lengths, groups = sparse_batch
    calls = []
    monkeypatch.setattr(trainer_base.PPOTrainer, "_compute_advantage", lambda self, batch, metrics: calls.append(1))
    meta, fields, _ = make_batch(rewards, groups, lengths)
    make_trainer("grpo")._compute_advantage(meta, {})
    assert calls == [1]


def test_reward_extra_columns_rejects_samples_without_reward_info():
    with pytest.raises(ValueError, match="sample 1"):
        reward_extra_columns([{"reward_extra_info": {"format": 1.0}}, {}], ["format"])
    with pytest.raises(ValueError, match="not a number"):
        reward_extra_columns([{"reward_extra_info": {"format": "1.0"}}], ["format"])
    columns = reward_extra_columns([{"reward_extra_info": {"format": np.float32(1)}}, {"reward_extra_info": {"format": 0}}],
                                   ["format"])
    assert columns["format"].tolist() == [1.0, 0.0]


def test_the_dara_trainer_behaves_as_verls_sync_trainer(tmp_path):
    """Selected as trainer_mode=dara_sync, it still takes every "sync" branch of verl (e.g. the sync replay buffer)."""
    import os

    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[f"trainer.v1.trainer_mode={TRAINER_MODE}",
                                                            "algorithm.adv_estimator=dara_sym"])
    trainer = object.__new__(DaraPPOTrainer)
    trainer.config = cfg
    trainer.trainer_mode = cfg.trainer.v1.trainer_mode
    assert trainer.trainer_mode == "sync"
    assert type(trainer._build_replay_buffer()) is ReplayBuffer
    with pytest.raises(ValueError, match="colocate_async"):
        trainer.trainer_mode = "colocate_async"


def test_dara_grpo_equals_verls_grpo_on_the_summed_score(monkeypatch, sparse_batch):
    """GRPO keeps verl's meaning (z-score of the summed token reward) and adds the channel diagnostics."""
    rewards, lengths, groups = sparse_batch
    put, metrics, uids = run_step(monkeypatch, "dara_grpo", rewards, lengths, groups)
    width = max(lengths)
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).to(torch.int64)
    scores = torch.zeros(len(lengths), width)
    scores[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = torch.tensor(rewards.sum(axis=1), dtype=torch.float32)
    expected, _ = core_algos.compute_grpo_outcome_advantage(scores, mask, np.array(uids, dtype=object))
    torch.testing.assert_close(padded(put["advantages"]), expected, atol=2e-5, rtol=1e-5)
    assert metrics["dara/weight/correctness"] == 1.0 and "dara/density/correctness" in metrics


def test_multi_output_sessions_are_refused(monkeypatch, sparse_batch):
    """verl scores only a multi-turn session's last output; our estimators would count the session twice."""
    rewards, lengths, groups = sparse_batch
    meta, fields, _ = make_batch(rewards, groups, lengths)
    meta.keys[1] = meta.keys[0].rsplit("_", 1)[0] + "_1"  # a second output of the first session
    monkeypatch.setattr(trainer_base, "tq", FakeTransferQueue(fields))
    with pytest.raises(ValueError, match="several outputs"):
        make_trainer("dara_sym")._compute_advantage(meta, {})


def test_a_trainer_that_failed_to_register_is_reported_with_its_error(monkeypatch):
    import sys

    import dara.verl_plugin as plugin

    class Broken:  # the trainer module's import fails with an error other than ImportError
        def find_spec(self, name, path=None, target=None):
            if name == "dara.verl_plugin.trainer":
                raise RuntimeError("verl changed under us")
            return None

    monkeypatch.delattr(plugin, "trainer")
    monkeypatch.delitem(sys.modules, "dara.verl_plugin.trainer")
    monkeypatch.setattr(sys, "meta_path", [Broken(), *sys.meta_path])
    monkeypatch.delitem(trainer_base.TRAINER_REGISTRY, TRAINER_MODE)
    with pytest.raises(RuntimeError, match="changed under us"):
        plugin.register()  # verl would swallow this ...
    with pytest.raises(RuntimeError, match=r"not in verl's trainer registry.*changed under us"):
        assert_registered()  # ... so the check names it
    plugin._REGISTRATION_ERRORS.clear()


def test_the_replay_buffer_polls_every_50_ms_instead_of_2_s(monkeypatch):
    """verl's buffer sleeps its poll interval between checks for a finished rollout; dara_sync shortens it."""
    from types import SimpleNamespace

    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    built = SimpleNamespace(poll_interval=2.0)
    monkeypatch.setattr(PPOTrainerSync, "_build_replay_buffer", lambda self: built, raising=False)
    trainer = object.__new__(DaraPPOTrainer)  # no Ray, no workers: only the method under test
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": "grpo"}})
    assert trainer._build_replay_buffer() is built and built.poll_interval == 0.05


def _replay_buffer(filter_metric="reward"):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    return ReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=None,
                        max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create({}), refill_fn=lambda n: None,
                        filter_groups_metric=filter_metric, train_batch_size=2, gen_batch_size=1)


# four finished groups of two responses, rewards (format, correctness): only g1 (format) and g3 (correctness) vary,
# so dynamic sampling on the summed reward keeps those two and drops g0 and g2, where nothing varies
POOL = {"g0_0": (0.0, 1.0), "g0_1": (0.0, 1.0), "g1_0": (1.0, 0.0), "g1_1": (0.0, 0.0),
        "g2_0": (0.0, 0.0), "g2_1": (0.0, 0.0), "g3_0": (0.0, 1.0), "g3_1": (0.0, 0.0)}


def _fake_transfer_queue(monkeypatch):
    from verl.trainer.ppo.v1 import replay_buffer

    def kv_batch_get(keys, partition_id, select_fields):
        if select_fields == ["rm_scores"]:
            return {"rm_scores": [torch.tensor([sum(POOL[key])]) for key in keys]}
        assert select_fields == ["extra_fields"]
        return {"extra_fields": [{"reward_extra_info": dict(zip(("format", "correctness"), POOL[key]))}
                                 for key in keys]}

    monkeypatch.setattr(replay_buffer.tq, "kv_batch_get", kv_batch_get)


def test_the_prefilter_buffer_measures_every_group_the_filter_saw(monkeypatch):
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from dara.verl_plugin.estimators import DaraSettings
    from dara.verl_plugin.prefilter import PrefilterReplayBuffer, prefilter_metrics

    _fake_transfer_queue(monkeypatch)
    settings = DaraSettings(reward_keys=("format", "correctness"))
    buffer = PrefilterReplayBuffer.attach(_replay_buffer(), "dara_sym", settings)

    def verl_sample(self, global_steps, partition_id, batch_size):
        # what verl's loop does while gathering a batch: classify finished groups, evict the filtered ones
        self.partitions[partition_id].update({key: {} for key in POOL})
        self.finished_keys[partition_id].update({"g0", "g1", "g2", "g3"})
        filtered, _ = self._dapo_filtered_keys(partition_id)
        assert filtered == {"g0", "g2"}
        self._dapo_filtered_keys(partition_id)  # a later poll classifies nothing new
        return "batch", {"verl/metric": 1.0}

    monkeypatch.setattr(ReplayBuffer, "sample", verl_sample)
    batch, metrics = buffer.sample(global_steps=1, partition_id="train", batch_size=2)
    assert batch == "batch" and metrics["verl/metric"] == 1.0
    # the pool before the filter: format varies in one group of four (g1), correctness in one (g3)
    assert metrics["dara/rollout_prefilter/density/format"] == 0.25
    assert metrics["dara/rollout_prefilter/density/correctness"] == 0.25
    assert metrics["dara/rollout_prefilter/n_groups"] == 4
    keys = sorted(POOL)
    assert metrics == {"verl/metric": 1.0, **prefilter_metrics("dara_sym", settings, [POOL[k] for k in keys],
                                                                [k.split("_")[0] for k in keys])}
    # what the advantage step sees after the filter (g1, g3): each channel varies in one group of two, twice the
    # pool's density: the bias toward 1 the pre-filter view avoids
    kept = ["g1_0", "g1_1", "g3_0", "g3_1"]
    after = prefilter_metrics("dara_sym", settings, [POOL[k] for k in kept], [k.split("_")[0] for k in kept])
    assert after["dara/rollout_prefilter/density/format"] == after["dara/rollout_prefilter/density/correctness"] == 0.5


def test_a_trajectory_without_a_reward_channel_is_refused():
    from dara.verl_plugin.prefilter import reward_rows

    with pytest.raises(RuntimeError, match="no reward channel \\['correctness'\\]"):
        reward_rows(["g0_0"], [{"reward_extra_info": {"format": 1.0}}], ("format", "correctness"))


def test_the_trainer_attaches_the_prefilter_buffer_only_with_dynamic_sampling(monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from dara.verl_plugin.prefilter import PrefilterReplayBuffer

    trainer = object.__new__(DaraPPOTrainer)
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": "dara_asym",
                                                     "dara": {"reward_keys": ["format", "correctness"]}}})
    for metric, expected in (("reward", PrefilterReplayBuffer), (None, None)):
        monkeypatch.setattr(PPOTrainerSync, "_build_replay_buffer", lambda self: _replay_buffer(metric), raising=False)
        built = trainer._build_replay_buffer()
        assert built.poll_interval == 0.05
        assert isinstance(built, PrefilterReplayBuffer) == (expected is not None)
    with pytest.raises(TypeError, match="synchronous ReplayBuffer"):
        PrefilterReplayBuffer.attach(object(), "dara_asym", None)


def test_the_rollout_dump_gets_the_group_the_policy_step_and_every_reward_key():
    from dara.verl_plugin.trainer import rollout_dump_columns

    class Wrapped:  # TransferQueue hands some per-sample objects over wrapped in .data
        def __init__(self, data):
            self.data = data

    keys = ["u1_0_0", "u1_1_0", "u2_0_0"]
    extra = [{"reward_extra_info": {"format": 1.0, "correctness": -3.0, "score": 9.0}},
             Wrapped({"reward_extra_info": {"format": 0.0, "correctness": 2.5, "score": 9.0}}),
             {"other": 1}]  # a sample without reward_extra_info
    columns = rollout_dump_columns(keys, extra, verl_step=3)
    assert columns["group"] == ["u1", "u1", "u2"]
    # verl's step 3 rolled out the policy after 2 updates: metrics.parquet's row 2
    assert columns["policy_step"] == [2, 2, 2]
    assert columns["format"] == [1.0, 0.0, None] and columns["correctness"] == [-3.0, 2.5, None]
    # a key that verl's dump already writes keeps its value under another name instead of overwriting
    assert columns["reward_extra/score"] == [9.0, 9.0, None] and "score" not in columns
    assert rollout_dump_columns(keys, None, verl_step=1) == {"group": ["u1", "u1", "u2"], "policy_step": [0, 0, 0]}
    # a reward named like a column the dump writes keeps its value under another name
    renamed = rollout_dump_columns(keys[:1], [{"reward_extra_info": {"policy_step": 7.0}}], verl_step=1)
    assert renamed["policy_step"] == [0] and renamed["reward_extra/policy_step"] == [7.0]


@pytest.mark.parametrize("estimator", ["grpo", "dara_asym"])
def test_the_monitor_logs_the_diagnostics_and_leaves_the_advantages_alone(monkeypatch, sparse_batch, estimator):
    """verl's own GRPO (through dara_sync) and one of ours: bit-identical advantages with and without the monitor,
    and the batch's densities, DARA weights and energy shares under dara_monitor/."""
    from dara.diagnose import batch_diagnostics

    rewards, lengths, groups = sparse_batch
    plain, plain_metrics, uids = run_step(monkeypatch, estimator, rewards, lengths, groups)
    watched, metrics, _ = run_step(monkeypatch, estimator, rewards, lengths, groups, monitor=True)
    assert set(plain) == set(watched)
    for name in plain:
        assert torch.equal(padded(plain[name]), padded(watched[name])), name
    assert not any(name.startswith("dara_monitor/") for name in plain_metrics)
    expected = batch_diagnostics(rewards, np.array(uids, dtype=object), list(KEYS))
    assert expected["density/correctness"] < expected["density/format"]  # the fixture's sparse channel
    for name, value in expected.items():
        assert metrics[f"dara_monitor/{name}"] == pytest.approx(value, nan_ok=True), name
    for name in metrics:
        assert not any(word in name for word in RESERVED_METRIC_WORDS), name


def test_the_monitor_flag_must_be_a_boolean():
    from dara.verl_plugin.estimators import DaraSettings

    config = OmegaConf.create({"dara": {"reward_keys": ["format"], "monitor": "yes"}})
    with pytest.raises(ValueError, match="monitor must be true or false"):
        DaraSettings.from_algorithm_config(config)
