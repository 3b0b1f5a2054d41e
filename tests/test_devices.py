"""The ``device`` of the tiny trainer, dara.trl, the hf rollout and the verl launcher (`dara.devices`): "cpu" (the
default) leaves a run's config.yaml as it was before the setting existed; "cuda" is recorded there, and without a GPU
stops with an error that says so, before anything is written; the device reaches TRL's config and the rollout
server's model. The GPU itself is exercised by ``make gpu-check`` (benchmarks/gpu_check.py)."""

from pathlib import Path

import pytest
import torch

from dara.devices import device_config_entries, torch_device, verl_device
from dara.experiments import default_settings
from dara.runs import Run
from dara.tiny.trainer import TrainSettings, resolved_config, train
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


def test_torch_device_resolves_cpu_and_refuses_other_names_and_a_missing_gpu(monkeypatch):
    assert torch_device("cpu") == torch.device("cpu")
    for name in ("gpu", "CUDA", "cuda:0", ""):
        with pytest.raises(ValueError, match=f"device must be one of cpu, cuda; got {name!r}"):
            torch_device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="device 'cuda' was asked for, but .* sees no CUDA GPU"):
        torch_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert torch_device("cuda") == torch.device("cuda")


def test_only_a_device_other_than_cpu_is_recorded_in_a_runs_config():
    assert device_config_entries("cpu") == {}
    assert device_config_entries("cuda") == {"device": "cuda"}
    with pytest.raises(ValueError, match="got 'gpu'"):
        device_config_entries("gpu")


class _ConfigWritten(Exception):
    """Raised once a trainer has written its config.yaml, so that the test stops it before any training."""


@pytest.mark.parametrize("backend", ["tiny", "trl"])
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_cpu_runs_config_yaml_is_the_one_without_a_device_and_a_gpu_runs_records_it(act_policy, tmp_path,
                                                                                       monkeypatch, backend, device):
    import yaml

    if backend == "trl":
        pytest.importorskip("trl")
        import dara.trl.train as trainer
        from types import SimpleNamespace

        # TRL's config sets its device up when it is built (a GPU's, with use_cpu False): a plain record instead
        monkeypatch.setattr(trainer, "DaraGRPOConfig", lambda **settings: SimpleNamespace(**settings))
    else:
        import dara.tiny.trainer as trainer
    write = trainer.write_run_provenance

    def write_then_stop(run_dir, config):
        write(run_dir, config)
        raise _ConfigWritten

    monkeypatch.setattr(trainer, "write_run_provenance", write_then_stop)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # "cuda" passes the check; nothing trains
    run = _run(tmp_path, backend=backend)
    with pytest.raises(_ConfigWritten):
        trainer.train(run, policy=str(act_policy), progress=False, device=device)
    written = (Path(run.run_dir) / "config.yaml").read_text()
    config = yaml.safe_load(written)
    resolved = resolved_config(run, TrainSettings.of(run))
    if device == "cpu":
        assert "device" not in config
        if backend == "tiny":  # no device entry at all: the resolved settings, then the policy's digest and path
            from dara.tiny.policy import policy_digest

            assert written == yaml.safe_dump({**resolved, "policy_sha256": policy_digest(act_policy),
                                              "policy": str(act_policy)}, sort_keys=False)
    else:
        assert config["device"] == "cuda"
        assert list(config)[:len(resolved) + 1] == [*resolved, "device"]  # right after the resolved settings
    assert {key: config[key] for key in resolved} == resolved


def test_a_verl_run_is_on_the_gpu_unless_its_settings_say_cpu(monkeypatch):
    from dara.verl_plugin.cpu import worker_environment

    assert verl_device({}) == "cuda" and verl_device({"device": "cuda"}) == "cuda"
    assert verl_device({"device": "cpu"}) == "cpu"
    with pytest.raises(ValueError, match="got 'tpu'"):
        verl_device({"device": "tpu"})
    with pytest.raises(ValueError, match="got 'npu'"):
        worker_environment({}, "npu")


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
    with pytest.raises(RuntimeError, match="device 'cuda' was asked for, but .* sees no CUDA GPU"):
        HFServer({"response_length": 8, "prompt_length": 8}, {"local_path": str(tmp_path)}, device="cuda")
    with pytest.raises(ValueError, match="does not know dtype 'int8'"):
        served_model_settings("cuda", "int8")
    with pytest.raises(ValueError, match="device must be one of cpu, cuda; got 'npu'"):
        served_model_settings("npu", None)
    assert served_model_settings("cuda", "fp16")["dtype"] == torch.float16
