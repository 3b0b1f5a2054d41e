"""The record a constructed run folder needs: config.yaml as the trainers write it, naming the run by `dara.runs.Run`'s
field names (the analysis reads who a run is from it, `dara.runs.run_identity`)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_run_record(run_dir: str | Path, task: str, method: str, group_size: int, seed: int, *,
                     warm_start: object = None, backend: str | None = None, model: str | None = None) -> Path:
    """config.yaml in ``run_dir`` (created): the CPU trainers' top-level fields (`dara.tiny.trainer.resolved_config`;
    ``backend`` as TRL adds it, ``warm_start`` left out where None, as a record from before several warm starts), or,
    for ``backend="verl"``, the verl launcher's ``run`` block with the ``model``."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    identity: dict = {"task": task, "method": method, "group_size": group_size, "seed": seed}
    if warm_start is not None:
        identity["warm_start"] = warm_start
    if backend == "verl":
        config = {"run": {**identity, "model": model}, "settings": {}}
    else:
        config = {**identity, **({"backend": backend} if backend else {})}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return run_dir / "config.yaml"
