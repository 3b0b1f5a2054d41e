"""The analysis configuration (``analysis/config.yaml``): validated against its JSON Schema on load,
with per-scale overrides merged in, so a typo fails at once with the key's name."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import yaml


def load_analysis_config(path, scale: str) -> dict:
    """Read ``path``, validate it against ``config.schema.yaml`` beside it, apply ``scale_overrides[scale]``."""
    path = Path(path)
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    schema = yaml.safe_load((path.parent / "config.schema.yaml").read_text(encoding="utf-8"))
    try:
        jsonschema.validate(config, schema)
    except jsonschema.ValidationError as error:
        location = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise ValueError(f"{path}: {location}: {error.message}") from None
    resolved = copy.deepcopy(config)
    for key, override in config.get("scale_overrides", {}).get(scale, {}).items():
        resolved[key] = {**resolved[key], **override}
    resolved.pop("scale_overrides", None)
    resolved["scale"] = scale
    return resolved
