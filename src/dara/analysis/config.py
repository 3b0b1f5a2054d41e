"""The analysis configuration: the study-wide ``analysis/config.yaml`` with the scale's own ``analysis`` block of
its experiment file merged in, validated against ``config.schema.yaml`` (beside the config) on load, so a typo fails
at once with the key's name."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import yaml

from dara.experiments import is_paper_setting, load_experiment


def load_analysis_config(path, experiment) -> dict:
    """Read ``path`` and merge the ``analysis`` block of ``experiment`` (a scale name or an experiment yaml) over it,
    each key one level deep; the result, validated, also holds ``scale`` (the experiment's name) and
    ``paper_setting`` (whether its runs are the paper's models on GPUs, `dara.experiments.is_paper_setting`)."""
    path = Path(path)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    schema = yaml.safe_load((path.parent / "config.schema.yaml").read_text(encoding="utf-8"))
    _validate(config, schema, str(path))
    loaded = load_experiment(experiment)
    resolved = copy.deepcopy(config)
    for key, override in loaded.get("analysis", {}).items():
        if isinstance(resolved.get(key), dict) and not isinstance(override, dict):
            raise ValueError(f"experiment {loaded['scale']!r}: analysis/{key} must be a mapping of keys of {key} "
                             f"in {path}, got {override!r}")
        resolved[key] = {**resolved[key], **override} if isinstance(resolved.get(key), dict) else override
    source = f"{path} with the analysis block of experiment {loaded['scale']!r}"
    _validate(resolved, schema, source)
    _check_beyond_the_schema(resolved, source)
    resolved["scale"] = loaded["scale"]
    resolved["paper_setting"] = is_paper_setting(loaded)
    return resolved


def _validate(config: dict, schema: dict, source: str) -> None:
    try:
        jsonschema.validate(config, schema)
    except jsonschema.ValidationError as error:
        location = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise ValueError(f"{source}: {location}: {error.message}") from None


def _check_beyond_the_schema(config: dict, source: str) -> None:
    """Rules the schema cannot state: the stable-crossing claims' threshold is one fig5 computes records at, and a
    metric's non-inferiority bounds are a floor below a ceiling."""
    stable = config["stable_crossing"]
    if not any(abs(stable["claim_threshold"] - threshold) < 1e-9 for threshold in stable["thresholds"]):
        raise ValueError(f"{source}: stable_crossing: claim_threshold {stable['claim_threshold']} is not one of "
                         f"thresholds {stable['thresholds']}")
    for metric, settings in config["non_inferiority"].items():
        low, high = settings.get("bounds", (0, 100))
        if not low < high:
            raise ValueError(f"{source}: non_inferiority/{metric}: bounds must be [floor, ceiling] with floor < "
                             f"ceiling, got {settings['bounds']}")
