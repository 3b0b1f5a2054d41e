"""Each run's warm start reaches the analysis from the run's own record (config.yaml, the evaluation JSON), and the
snapshot's step-0 table shows every warm start of a task with their median."""

import json

import pandas as pd
import pytest

from dara.analysis.run_tables import WARM_START, load_evaluations, load_metrics
from dara.analysis.crossing import crossing_records
from dara.analysis.tables import paper_metrics
from run_records import write_run_record
from script_loader import load_script


def _run(root, method, seed, warm_start, rewards):
    run_dir = root / "runs" / "toolcall" / method / "G4" / f"seed{seed}"
    # warm_start None: a record from before several warm starts, which names none
    write_run_record(run_dir, "toolcall", method, 4, seed, warm_start=warm_start)
    pd.DataFrame({"step": range(len(rewards)), "reward/format": rewards}).to_parquet(run_dir / "metrics.parquet")
    return run_dir / "metrics.parquet"


def test_metrics_and_crossings_carry_each_runs_warm_start_from_its_config(tmp_path):
    paths = [_run(tmp_path, "gdpo", 0, 0, [0.0, 0.9]), _run(tmp_path, "gdpo", 1, 3, [0.0, 0.1]),
             _run(tmp_path, "dara_sym", 0, None, [0.0, 0.9])]  # a record from before several warm starts
    metrics = load_metrics(paths)
    by_run = metrics.groupby(["method", "seed"])[WARM_START].unique().map(list).to_dict()
    assert by_run == {("dara_sym", 0): [0], ("gdpo", 0): [0], ("gdpo", 1): [3]}
    records = crossing_records(metrics, {"format": [0.8]})
    assert records.set_index(["method", "seed"])[WARM_START].to_dict() == {
        ("dara_sym", 0): 0, ("gdpo", 0): 0, ("gdpo", 1): 3}


def test_a_malformed_warm_start_in_a_config_is_refused_naming_the_file(tmp_path):
    path = _run(tmp_path, "gdpo", 0, "two", [0.0, 0.9])
    with pytest.raises(ValueError, match="config.yaml: warm_start must be an integer"):
        load_metrics([path])


def test_evaluations_carry_the_warm_start_their_record_names(tmp_path):
    eval_dir = tmp_path / "eval" / "toolcall" / "gdpo" / "G4"
    for seed, warm_start in ((0, 2), (1, None)):
        folder = eval_dir / f"seed{seed}"
        folder.mkdir(parents=True)
        record = {"task": "toolcall", "method": "gdpo", "group_size": 4, "seed": seed, "metrics": {"accuracy": 0.5}}
        if warm_start is not None:
            record[WARM_START] = warm_start
        (folder / "step0.json").write_text(json.dumps(record))
    evaluations = load_evaluations(sorted(eval_dir.glob("seed*/step0.json")))
    assert evaluations[WARM_START].tolist() == [2, 0]
    assert list(evaluations.columns[:5]) == ["task", "method", "G", "seed", WARM_START]
    assert WARM_START in paper_metrics(evaluations, {"acc": "metrics/accuracy"}).columns
    (eval_dir / "seed0" / "step0.json").write_text(json.dumps(
        {"task": "toolcall", "method": "gdpo", "group_size": 4, "seed": 0, "warm_start": -1}))
    with pytest.raises(ValueError, match="warm_start must be an integer >= 0"):
        load_evaluations([eval_dir / "seed0" / "step0.json"])


def test_the_step0_table_shows_each_warm_start_and_their_median(tmp_path):
    snapshot = load_script("analysis/snapshot.py")
    for index, (mean, density) in enumerate(((0.0, 0.02), (0.1, 0.10), (0.05, 0.30))):
        folder = tmp_path / "toolcall" / f"warm_start{index}"
        folder.mkdir(parents=True)
        (folder / "warmstart.json").write_text(json.dumps(
            {"step0": {"reward/format": mean, "density/format": density}}))
    table = snapshot.step0_table(tmp_path)
    assert "| `toolcall` | format | 3 | 0.050 (0.000 0.100 0.050) | 0.10 (0.02 0.10 0.30) |" in table
    with pytest.raises(FileNotFoundError, match="no warm start"):
        snapshot.step0_table(tmp_path / "empty")


def _machine(capability="AVX2", pinned=True, model="AMD EPYC"):
    return {"dispatch": {"aten_cpu_capability": capability, "mkl_cbwr_branch": "COMPATIBLE", "pinned": pinned,
                         "variables": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}, "torch_threads": 1,
                         "torch": "2.13.0+cpu", "mkl": "2024.2", "onednn": "3.12.0"},
            "cpu": {"vendor": "AuthenticAMD", "model_name": model, "family": "25", "model": "17", "logical_cpus": 2,
                    "flags": {"avx2": True, "avx512f": True, "amx_tile": False}}}


def test_the_machine_table_names_the_one_cpu_and_pin_and_refuses_a_mixed_tree(tmp_path):
    snapshot = load_script("analysis/snapshot.py")
    run = tmp_path / "runs" / "toolcall" / "gdpo" / "G4" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.parquet").write_bytes(b"")
    (run / "machine.json").write_text(json.dumps(_machine()))
    warm = tmp_path / "policies" / "toolcall" / "warm_start0"
    warm.mkdir(parents=True)
    (warm / "warmstart.json").write_text(json.dumps({"machine": _machine()}))
    table = snapshot.machine_table(tmp_path)
    assert "| kernel pin | `ATEN_CPU_CAPABILITY=avx2`, `MKL_CBWR=COMPATIBLE` |" in table
    assert "| vector instructions | avx2, avx512f |" in table and "| runs and warm starts recorded | 2 |" in table
    # a record from before OpenBLAS's core and numpy's loops were read
    assert "OpenBLAS (not recorded) kernels, numpy's loops (not recorded) |" in table
    assert "| torch, MKL, oneDNN | 2.13.0+cpu, 2024.2, 3.12.0 |" in table
    (warm / "warmstart.json").write_text(json.dumps({"machine": _machine(model="Intel Xeon")}))
    with pytest.raises(SystemExit, match="1 kernel dispatches on 2 CPU types"):
        snapshot.machine_table(tmp_path)
    (warm / "warmstart.json").write_text(json.dumps({"machine": _machine(pinned=False)}))
    with pytest.raises(SystemExit, match="not all pinned"):
        snapshot.machine_table(tmp_path)
    (warm / "warmstart.json").write_text(json.dumps({}))
    with pytest.raises(SystemExit, match="no machine record"):
        snapshot.machine_table(tmp_path)
    (run / "machine.json").unlink()
    with pytest.raises(SystemExit, match="1 of the 1 runs"):
        snapshot.machine_table(tmp_path)
