"""Who a run is comes from its own record (config.yaml, an evaluation's fields), by `dara.runs.Run`'s field names;
the folder's names must agree, and a missing or disagreeing record is an error naming the path. Checked on a
constructed runs tree of every backend's record: the tiny trainer's, TRL's and the verl launcher's (its own folder
and its task's shared view)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from dara.analysis.run_tables import load_evaluations, load_metrics
from dara.runs import VERL_STEP_COLUMN, parse_run_dir, read_run_record, run_dir_of_evaluation, run_identity, run_tail
from run_records import write_run_record
from script_loader import load_script


def _metrics(run_dir: Path, formats, verl: bool = False) -> Path:
    """A metrics.parquet; a verl run's carries verl's own step numbers (row s: verl step s + 1), as its logs write it."""
    path = run_dir / "metrics.parquet"
    frame = pd.DataFrame({"step": range(len(formats)), "reward/format": formats})
    if verl:
        frame[VERL_STEP_COLUMN] = frame["step"] + 1.0
    frame.to_parquet(path)
    return path


@pytest.fixture
def tree(tmp_path):
    """results/verl_cpu with a verl run in its model's folder and in its task's shared view, its tiny twin, and a
    TRL run beside a tiny run at the tiny scale."""
    results = tmp_path / "results"
    paths = {}
    own = results / "verl_cpu" / "runs" / "toolcall-tiny_tool" / "gdpo" / "G4" / "seed1"
    write_run_record(own, "toolcall", "gdpo", 4, 1, backend="verl", model="tiny_tool")
    paths["verl"] = _metrics(own, [0.1, 0.9], verl=True)
    view = results / "verl_cpu" / "runs" / "toolcall" / "gdpo" / "G4" / "seed1"
    write_run_record(view, "toolcall", "gdpo", 4, 1, backend="verl", model="tiny_tool")  # paper.smk copies it
    paths["view"] = _metrics(view, [0.1, 0.9], verl=True)
    twin = results / "verl_cpu" / "tiny" / "runs" / "toolcall" / "gdpo" / "G4" / "seed1"
    write_run_record(twin, "toolcall", "gdpo", 4, 1, warm_start=0)
    paths["twin"] = _metrics(twin, [0.2, 0.85])
    tiny = results / "tiny" / "runs" / "toolcall" / "dara_sym" / "G8" / "seed3"
    write_run_record(tiny, "toolcall", "dara_sym", 8, 3, warm_start=2)
    paths["tiny"] = _metrics(tiny, [0.3, 0.7, 0.9])
    trl = results / "tiny" / "trl" / "runs" / "toolcall" / "dara_sym" / "G8" / "seed3"
    write_run_record(trl, "toolcall", "dara_sym", 8, 3, warm_start=2, backend="trl")
    paths["trl"] = _metrics(trl, [0.3, 0.8, 0.95])
    return paths


def test_every_backends_record_names_the_run_by_runs_fields(tree):
    assert read_run_record(tree["verl"].parent) == {"task": "toolcall", "model": "tiny_tool", "method": "gdpo",
                                                    "group_size": 4, "seed": 1, "warm_start": 0, "backend": "verl"}
    assert read_run_record(tree["twin"].parent)["backend"] == "tiny"  # the tiny trainer names no backend
    assert read_run_record(tree["trl"].parent) == {"task": "toolcall", "model": None, "method": "dara_sym",
                                                   "group_size": 8, "seed": 3, "warm_start": 2, "backend": "trl"}
    # the task folder a run is read from: the model's own, or the task's shared view
    assert run_identity(tree["verl"].parent)["task_dir"] == "toolcall-tiny_tool"
    assert run_identity(tree["view"].parent)["task_dir"] == "toolcall"


def test_the_loaders_key_runs_by_their_records(tree):
    metrics = load_metrics([tree["verl"], tree["view"], tree["tiny"]])
    keys = metrics[["task", "method", "G", "seed", "warm_start"]].drop_duplicates().values.tolist()
    assert keys == [["toolcall-tiny_tool", "gdpo", 4, 1, 0], ["toolcall", "gdpo", 4, 1, 0],
                    ["toolcall", "dara_sym", 8, 3, 2]]


@pytest.mark.parametrize("field, value, message", [
    ("seed", 2, "records seed=2 but its folder says 1"),
    ("method", "grpo", "records method='grpo' but its folder says 'gdpo'"),
    ("group_size", 8, "records group_size=8 but its folder says 4"),
    ("task", "math_length", "records task='math_length' but its folder says 'toolcall'"),
    ("model", "other", "records model='other' but its folder says 'tiny_tool'"),
])
def test_a_record_that_disagrees_with_its_folder_is_an_error_naming_it(tree, field, value, message):
    run_dir = tree["verl"].parent
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["run"][field] = value
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match=f"toolcall-tiny_tool/gdpo/G4/seed1: config.yaml {message}"):
        load_metrics([tree["verl"]])


def test_a_missing_or_incomplete_record_is_an_error_naming_it(tree):
    run_dir = tree["tiny"].parent
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"task": "toolcall", "method": "dara_sym"}))
    with pytest.raises(ValueError, match=r"seed3/config.yaml records no group_size, seed"):
        load_metrics([tree["tiny"]])
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"task": "toolcall", "method": "dara_sym", "group_size": "8",
                                                        "seed": 3}))
    with pytest.raises(ValueError, match="group_size must be an integer, got '8'"):
        load_metrics([tree["tiny"]])
    (run_dir / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match=r"dara_sym/G8/seed3/config.yaml is missing"):
        load_metrics([tree["tiny"]])


def test_a_run_folder_moved_out_of_the_layout_is_refused(tree, tmp_path):
    moved = tmp_path / "elsewhere"
    tree["tiny"].parent.rename(moved)
    with pytest.raises(ValueError, match="elsewhere does not end in <task>"):
        load_metrics([moved / "metrics.parquet"])


def test_an_evaluation_that_names_no_run_is_keyed_by_its_run_folders_record(tree):
    """The paper scale's BFCL and math scorers write no run fields: the run folder's config.yaml says who it is."""
    eval_dir = tree["verl"].parents[5] / "eval" / "toolcall-tiny_tool" / "gdpo" / "G4" / "seed1"
    eval_dir.mkdir(parents=True)
    (eval_dir / "step20.json").write_text(json.dumps({"model": "the scorer's", "metrics": {"bfcl_accuracy": 0.5}}))
    assert run_dir_of_evaluation(eval_dir) == tree["verl"].parent
    row = load_evaluations([eval_dir / "step20.json"]).iloc[0]
    assert (row["task"], row["method"], row["G"], row["seed"], row["step"]) == ("toolcall-tiny_tool", "gdpo", 4, 1, 20)
    assert row["metrics/bfcl_accuracy"] == 0.5
    (tree["verl"].parent / "config.yaml").unlink()
    with pytest.raises(FileNotFoundError, match="seed1/config.yaml is missing"):
        load_evaluations([eval_dir / "step20.json"])


def test_typed_folders_parse_into_runs_field_names():
    assert run_tail("x/toolcall-qwen2.5-1.5b/dara_sym/G8/seed3/") == {
        "task": "toolcall", "model": "qwen2.5-1.5b", "method": "dara_sym", "group_size": 8, "seed": 3}
    assert parse_run_dir("/a/results/tiny/trl/eval/toolcall/gdpo/G4/seed0") == {
        "scale": "tiny", "backend": "trl", "task": "toolcall", "model": None, "method": "gdpo", "group_size": 4,
        "seed": 0}
    with pytest.raises(ValueError, match="not a run folder"):
        parse_run_dir("runs/toolcall/gdpo/G4/seed0")


@pytest.mark.parametrize("scale, own, other, names", [
    ("tiny", "tiny", "trl", ("tiny", "trl")),
    ("verl_cpu", "verl", "tiny", ("view", "twin")),
])
def test_the_backends_script_sorts_runs_by_their_recorded_backend(tree, tmp_path, scale, own, other, names):
    backends = load_script("analysis/backends.py")
    repo = Path(__file__).resolve().parents[1]
    out = tmp_path / "out"
    backends.main(["--scale", scale, "--config", str(repo / "analysis/config.yaml"), "--own-backend", own,
                   "--metrics", *(str(tree[name]) for name in names), "--out-dir", str(out)])
    table = pd.read_csv(out / "tables" / "backends.csv")
    assert table[["task", "method"]].values.tolist() == [["toolcall", "gdpo" if own == "verl" else "dara_sym"]]
    assert {f"{own}/last_step", f"{other}/last_step"} <= set(table.columns)
    formats = {name: pd.read_parquet(tree[name])["reward/format"].iloc[-1] for name in names}
    assert table[f"{own}/final"].iloc[0] == formats[names[0]] and table[f"{other}/final"].iloc[0] == formats[names[1]]
