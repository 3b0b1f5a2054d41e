"""The ``device`` of the tiny trainer, dara.trl and the hf rollout: "cpu" (the default) changes nothing; "cuda"
without a GPU stops with an error that says so, before anything is written; the device reaches TRL's config and the
rollout server's model. The GPU itself is exercised by ``make gpu-check`` (benchmarks/gpu_check.py)."""

from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from dara.experiments import default_settings
from dara.runs import Run
from dara.tiny.policy import torch_device
from dara.tiny.trainer import TrainSettings, train
from dara.tiny.warmstart import warm_start
from experiment_defaults import small_warm_start

torch.set_num_threads(1)
ACT_OPTIONS = {"tag_rate": 0.5}


@pytest.fixture(scope="module")
def act_policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "act_critic"
    warm_start("act_critic", ACT_OPTIONS, path, **small_warm_start())
    return path


def _run(results, backend="tiny", **overrides) -> Run:
    # a KL penalty, so that the reference policy's copy follows the model too
    settings = dict(default_settings(), task_options=ACT_OPTIONS, steps=2, responses_per_step=16, max_new_tokens=16,
                    prompt_pool=64, eval_every=1, state_every=1, kl_coef=0.05, **overrides)
    return Run(scale="devices", backend=backend, task="act_critic", method="dara_asym", group_size=4, seed=3,
               settings=settings, results=str(results))


def test_an_explicit_cpu_device_trains_exactly_what_the_default_trains(act_policy, tmp_path):
    default, explicit = _run(tmp_path / "default"), _run(tmp_path / "explicit")
    first = train(default, policy=str(act_policy), progress=False)
    second = train(explicit, policy=str(act_policy), progress=False, device="cpu")
    assert first["advantage_abs"].gt(0).any()  # the policy moved: equal checkpoints are not the warm start twice
    pd.testing.assert_frame_equal(first.drop(columns="seconds"), second.drop(columns="seconds"))
    a, b = Path(default.run_dir), Path(explicit.run_dir)
    pd.testing.assert_frame_equal(pd.read_parquet(a / "rollouts.parquet"), pd.read_parquet(b / "rollouts.parquet"))
    for step in (1, 2):
        weights_a = load_file(a / "checkpoints" / f"step{step}" / "model.safetensors")
        weights_b = load_file(b / "checkpoints" / f"step{step}" / "model.safetensors")
        assert weights_a.keys() == weights_b.keys()
        assert all(torch.equal(weights_a[name], weights_b[name]) for name in weights_a)
    # a CPU run records no device: its config.yaml is the one written before the setting existed
    assert (a / "config.yaml").read_text() == (b / "config.yaml").read_text()
    assert "device" not in (b / "config.yaml").read_text()


@pytest.mark.parametrize("backend", ["tiny", "trl"])
def test_cuda_without_a_gpu_stops_before_anything_is_written(act_policy, tmp_path, monkeypatch, backend):
    if backend == "trl":
        pytest.importorskip("trl")
        from dara.trl.train import train as train_run
    else:
        train_run = train
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = _run(tmp_path, backend=backend)
    with pytest.raises(RuntimeError, match="device 'cuda' was asked for, but .* sees no CUDA GPU"):
        train_run(run, policy=str(act_policy), progress=False, device="cuda")
    with pytest.raises(ValueError, match="device must be one of cpu, cuda; got 'gpu'"):
        train_run(run, policy=str(act_policy), progress=False, device="gpu")
    assert not Path(run.run_dir).exists()


def test_the_trainers_command_line_takes_the_device(act_policy, tmp_path, monkeypatch):
    import dara.tiny.trainer as trainer

    seen = []
    monkeypatch.setattr(trainer, "train", lambda run, policy, progress, device: seen.append(device))
    trainer.main(["--run", _run(tmp_path).to_json(), "--policy", str(act_policy), "--device", "cuda"])
    trainer.main(["--run", _run(tmp_path).to_json(), "--policy", str(act_policy)])
    assert seen == ["cuda", "cpu"]
    with pytest.raises(SystemExit):
        trainer.main(["--run", _run(tmp_path).to_json(), "--device", "tpu"])


def test_the_device_reaches_trls_config(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    import dara.trl.train as trl_train

    run = _run(tmp_path, backend="trl")
    args = TrainSettings.of(run)
    assert trl_train.trl_config(run, args, tmp_path / "trl", progress=False).use_cpu is True
    # TRL's config sets its device up when it is built (a GPU's, with use_cpu False): recorded instead
    monkeypatch.setattr(trl_train, "DaraGRPOConfig", lambda **settings: settings)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert trl_train.trl_config(run, args, tmp_path / "trl", device="cuda")["use_cpu"] is False
    assert trl_train.trl_config(run, args, tmp_path / "trl", device="cpu")["use_cpu"] is True


def test_torch_device_names_the_devices():
    assert torch_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="one of cpu, cuda"):
        torch_device("cuda:0")


class _FakeModel:
    """What HFServer reads of a transformers model when it loads one; records where it was moved."""

    def __init__(self):
        from types import SimpleNamespace

        self.generation_config = SimpleNamespace(eos_token_id=1, pad_token_id=0)
        self.config = SimpleNamespace(eos_token_id=1)
        self.moved_to = []

    def to(self, device):
        self.moved_to.append(torch.device(device))
        return self

    def eval(self):
        return self


@pytest.mark.parametrize("device, dtype, attention, moved", [
    ("cpu", torch.float32, "eager", []),                      # verl_cpu: float32 as its actor, as before
    ("cuda", torch.bfloat16, "sdpa", [torch.device("cuda")]),  # the rollout's dtype; no flash-attn needed
])
def test_the_hf_rollout_serves_its_model_on_the_device(tmp_path, monkeypatch, device, dtype, attention, moved):
    pytest.importorskip("verl")
    import transformers

    from dara.verl_plugin.cpu_backend.hf_rollout import HFServer

    loaded = []

    def from_pretrained(path, **settings):
        loaded.append(settings)
        return _FakeModel()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    server = HFServer({"response_length": 8, "prompt_length": 8, "seed": 0, "dtype": "bfloat16"},
                      {"local_path": str(tmp_path)}, device=device)
    assert loaded == [{"dtype": dtype, "attn_implementation": attention}]
    assert server.model.moved_to == moved and server.device == torch.device(device)


def test_the_hf_rollout_refuses_a_gpu_it_cannot_see_and_unknown_settings(tmp_path, monkeypatch):
    pytest.importorskip("verl")
    from dara.verl_plugin.cpu_backend.hf_rollout import HFServer, served_model_settings

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="serve on 'cuda', but this process's torch sees no CUDA GPU"):
        HFServer({"response_length": 8, "prompt_length": 8}, {"local_path": str(tmp_path)}, device="cuda")
    with pytest.raises(ValueError, match="does not know dtype 'int8'"):
        served_model_settings("cuda", "int8")
    with pytest.raises(ValueError, match="'cpu' or 'cuda'; got device 'npu'"):
        served_model_settings("npu", None)
    assert served_model_settings("cuda", "fp16")["dtype"] == torch.float16
