"""A 2-step verl_cpu run of the tiny tool-calling task, built in a scratch folder: its warm-started policy, its verl
data and an experiment file naming them. Shared by tests/test_verl_cpu_e2e.py and the cluster tests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = "results/verl_cpu/runs/toolcall-tiny/dara_asym/G4/seed0"  # dara.runs layout, under the base folder
TASK_OPTIONS = {"format_rate": 0.4, "think_filler_max": 0}  # format varies inside groups from step 1


def two_step_experiment(base: Path) -> Path:
    """Writes the policy, the data and ``base/verl_cpu.yaml``; returns the experiment file."""
    from experiment_defaults import default_warm_start
    from dara.tiny.warmstart import warm_start
    from dara.verl_backend.tiny_data import prepare

    # trained enough that rewards vary inside groups (a policy that scores every response alike gives zero
    # advantages and no policy gradient to check)
    warm_start("toolcall", TASK_OPTIONS, base / "policy", **{**default_warm_start(), **dict(
        vocab_size=400, corpus_items=300, sft_steps=400, sft_batch_size=16, sft_learning_rate=0.01, probe_prompts=2,
        probe_group_size=2, max_new_tokens=48,
        model={"hidden_size": 32, "layers": 1, "heads": 2, "kv_heads": 1, "intermediate_size": 64,
               "max_positions": 256})})
    prepare("toolcall", TASK_OPTIONS, base / "policy", base / "data" / "toolcall", train_items=16, test_items=4)
    experiment = yaml.safe_load((ROOT / "experiments" / "verl_cpu.yaml").read_text())
    paper = experiment["settings"]["paper"]
    paper["data_dir"] = str(base / "data")
    paper["models"] = {"tiny": {"hf_id": str(base / "data" / "toolcall" / "policy"),
                                "resources": {"nodes": 1, "gpus_per_node": 1, "gpu_model": "cpu",
                                              "runtime_minutes": 10}}}
    paper["primary_models"] = {"toolcall": "tiny"}
    paper["target_models"] = {"toolcall": ["tiny"]}
    paper["verl"].update({"trainer.test_freq": -1,
                          # verl's rollout dump (one JSONL per step), which `dara diagnose` reads below
                          "trainer.rollout_data_dir": str(base / "rollouts")})
    del experiment["tasks"]["math_length"]
    experiment["targets"] = {"toolcall": experiment["targets"]["toolcall"]}  # verl only: no tiny-trainer twins
    # in the shared settings' words, as verl_cpu.yaml states them (verl's save_freq 1, mini_batch_responses 8)
    experiment["settings"].update(steps=2, responses_per_step=8, minibatches=1, eval_every=1)
    paper["verl"].update({f"actor_rollout_ref.{key}_micro_batch_size_per_gpu": 8
                          for key in ("actor.ppo", "rollout.log_prob", "ref.log_prob")})
    experiment["targets"]["toolcall"]["methods"] = ["dara_asym"]
    path = base / "verl_cpu.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return path


def ray_processes() -> set[str]:
    """Ray's processes running now ("pid args" lines), to compare before and after a run."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    return {line for line in out if ("ray::" in line or "raylet" in line or "gcs_server" in line)
            and "grep" not in line}


def ray_processes_left(before: set[str], timeout_s: float = 60) -> set[str]:
    """Ray processes that were not running ``before`` and still run after up to ``timeout_s`` (Ray's workers exit
    once their raylet is gone, which takes a moment after a run returns)."""
    deadline = time.monotonic() + timeout_s
    while (left := ray_processes() - before) and time.monotonic() < deadline:
        time.sleep(1)
    return left
