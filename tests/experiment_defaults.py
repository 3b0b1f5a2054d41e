"""The schema's defaults in the shapes the tests call the tiny code with (the pipeline gets the same defaults
through `dara.experiments.load_experiment`, which fills them into an experiment; a test builds a policy or samples
an evaluation without one)."""

from __future__ import annotations

from typing import Any

from dara.experiments import default_settings, schema_defaults


def default_warm_start() -> dict[str, Any]:
    """Keywords of `dara.tiny.warmstart.warm_start` (the model size included); ``max_new_tokens`` comes from the
    run settings, as `dara.experiments.warm_start_settings` takes it."""
    return {**schema_defaults("warm_start"), "model": schema_defaults("warm_start_model"),
            "max_new_tokens": default_settings()["max_new_tokens"]}


# A policy the tests can warm-start in seconds: a 1-layer model, 60 supervised steps, a small probe.
SMALL_WARM_START: dict[str, Any] = dict(
    vocab_size=400, corpus_items=200, sft_steps=60, sft_learning_rate=0.01, sft_batch_size=16, probe_prompts=4,
    probe_group_size=4, max_new_tokens=20,
    model={"hidden_size": 32, "layers": 1, "heads": 2, "kv_heads": 1, "intermediate_size": 64, "max_positions": 256})


def small_warm_start(**overrides) -> dict[str, Any]:
    """`default_warm_start` with `SMALL_WARM_START` and then ``overrides`` over it."""
    return {**default_warm_start(), **SMALL_WARM_START, **overrides}


def default_evaluation() -> dict[str, Any]:
    """Evaluation sampling (held-out items, samples, temperature, top-p, seed)."""
    return schema_defaults("evaluation")
