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


def default_evaluation() -> dict[str, Any]:
    """Evaluation sampling (held-out items, samples, temperature, top-p, seed)."""
    return schema_defaults("evaluation")
