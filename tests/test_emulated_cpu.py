"""benchmarks/emulated_cpu.py: reruns a draw's jobs under an emulator and compares their bytes. Here the "emulator"
is a stand-in that runs the command natively, so a rerun on this machine must give the smoke draw's bytes (the
plumbing: which files, from which warm start, into which folder); the real emulator's check of the pin is
tests/test_kernels.py's."""

import os
import stat
from pathlib import Path

import pytest

from benchmarks import emulated_cpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def native_emulator(tmp_path, monkeypatch) -> Path:
    """An `EMULATOR` that drops QEMU's ``-cpu MODEL`` and runs the rest here."""
    script = tmp_path / "fake-qemu"
    script.write_text('#!/bin/sh\nshift 2\nexec "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(emulated_cpu, "EMULATOR", str(script))
    return script


def test_a_native_rerun_of_the_smoke_draw_matches_it_file_by_file(smoke_results, native_emulator, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(ROOT)  # the run folders are named relative to the workflow's directory
    out = tmp_path / "page.md"
    code = emulated_cpu.main(["--experiment", "smoke", "--results", "results/smoke", "--warm-start", "toolcall/0",
                              "--run-dir", "results/smoke/runs/toolcall/dara_sym/G4/seed0",
                              "--work", str(tmp_path / "work"), "--out", str(out)])
    page = out.read_text()
    assert code == 0, page
    assert "**5 of 5 files byte-identical**" in page and "ATen AVX2, OpenBLAS Haswell" in page
    for name in ("model.safetensors", "tokenizer.json", "rollouts.parquet", "metrics.parquet (all but seconds)"):
        assert name in page
    # the run was retrained into the work folder, from the draw's warm start, and the warm start remade there
    assert (tmp_path / "work" / "results" / "smoke" / "runs" / "toolcall" / "dara_sym" / "G4" / "seed0"
            / "metrics.parquet").exists()
    assert (tmp_path / "work" / "policies" / "toolcall" / "warm_start0" / "model.safetensors").exists()
    # a second call with the same --work reuses the finished warm start instead of emulating it again

    def must_not_run(*args, **kwargs):
        raise AssertionError("the finished warm start was emulated again")

    monkeypatch.setattr(emulated_cpu, "_run_emulated", must_not_run)
    rows = emulated_cpu.check_warm_start("smoke", ROOT / "results" / "smoke", "toolcall", 0, tmp_path / "work",
                                         "Haswell")
    assert all(row["draw"] == row["emulated"] for row in rows) and len(rows) == 2
    # ... and the finished run, with the timing of its first call
    experiment = emulated_cpu.load_experiment("smoke")
    rows = emulated_cpu.check_run(experiment, "results/smoke/runs/toolcall/dara_sym/G4/seed0", tmp_path / "work",
                                  "Haswell")
    assert all(row["draw"] == row["emulated"] for row in rows) and len(rows) == 3
    assert f"| {rows[0]['seconds']:.0f} |" in page


def test_an_unfinished_emulated_run_starts_over(smoke_results, native_emulator, tmp_path, monkeypatch):
    """A run folder without its timing (a check killed mid-run) is retrained from scratch, not reused."""
    monkeypatch.chdir(ROOT)
    experiment = emulated_cpu.load_experiment("smoke")
    run_dir = "results/smoke/runs/toolcall/dara_sym/G4/seed0"
    leftover = tmp_path / "work" / run_dir
    leftover.mkdir(parents=True)
    (leftover / "metrics.parquet").write_text("a file from a killed job")
    rows = emulated_cpu.check_run(experiment, run_dir, tmp_path / "work", "Haswell")
    assert all(row["draw"] == row["emulated"] for row in rows) and len(rows) == 3
    assert (tmp_path / "work" / "toolcall-dara_sym-G4-seed0.seconds.json").exists()


def test_a_differing_file_fails_the_check_and_is_marked(monkeypatch, tmp_path, capsys):
    ran = "ATen AVX2, OpenBLAS Haswell"
    rows = [{"job": "run x", "file": "rollouts.parquet", "draw": "a" * 64, "emulated": "a" * 64, "seconds": 1.0,
             "ran": ran},
            {"job": "run x", "file": "checkpoints/step30/model.safetensors", "draw": "b" * 64, "emulated": "c" * 64,
             "seconds": 1.0, "ran": ran}]
    monkeypatch.setattr(emulated_cpu.shutil, "which", lambda name: "/usr/bin/true")
    monkeypatch.setattr(emulated_cpu, "check_run", lambda experiment, run_dir, work, cpu, allowed: rows)
    monkeypatch.chdir(ROOT)
    code = emulated_cpu.main(["--experiment", "smoke", "--warm-start", "--run-dir", "results/smoke/runs/x",
                              "--work", str(tmp_path)])
    page = capsys.readouterr().out
    assert code == 1
    assert "**1 of 2 files byte-identical**" in page and "| **no** |" in page and "| yes |" in page
    assert "does not cover everything" in page


def test_a_draw_made_by_other_code_is_refused():
    """Bytes of other code against this checkout's say nothing about the CPU: 650b268's parent trained with the
    unfused AdamW, so its src/ differs."""
    with pytest.raises(RuntimeError, match=r"whose src/ differs .*src/dara/tiny/trainer.py"):
        emulated_cpu._refuse_other_code("de659b2", "results/tiny/runs/x")
    with pytest.raises(RuntimeError, match="records no code revision"):
        emulated_cpu._refuse_other_code("unknown", "results/tiny/runs/x")
    with pytest.raises(RuntimeError, match="not in this checkout's history"):
        emulated_cpu._refuse_other_code("0" * 40, "results/tiny/runs/x")
    assert emulated_cpu._refuse_other_code("HEAD", "results/tiny/runs/x") == []  # this checkout's own code passes
    # allowed, the differing files come back for the page
    assert "src/dara/tiny/trainer.py" in emulated_cpu._refuse_other_code("de659b2", "x", allowed=True)


def test_an_emulated_job_that_ran_other_kernels_is_refused(tmp_path):
    """An emulator without AVX2 (QEMU before 7.2) would make ATen fall back to its default kernels: named, not
    reported as a difference the pin missed."""
    record = {"dispatch": {"aten_cpu_capability": "DEFAULT", "openblas_core": "Haswell"}}
    with pytest.raises(RuntimeError, match="ran ATen DEFAULT, OpenBLAS Haswell, not the pinned kernels"):
        emulated_cpu._checked_dispatch(record, tmp_path)
    pinned = {"dispatch": {"aten_cpu_capability": "AVX2", "openblas_core": "Haswell"}}
    assert emulated_cpu._checked_dispatch(pinned, tmp_path) == "ATen AVX2, OpenBLAS Haswell"


def test_a_missing_emulator_is_named(monkeypatch, capsys):
    monkeypatch.setattr(emulated_cpu.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit):
        emulated_cpu.main([])
    assert "qemu-user" in capsys.readouterr().err


def test_a_warm_start_that_is_not_task_slash_index_is_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(emulated_cpu.shutil, "which", lambda name: "/usr/bin/true")
    with pytest.raises(SystemExit):
        emulated_cpu.main(["--experiment", "smoke", "--warm-start", "toolcall", "--work", str(tmp_path)])
    assert "TASK/K" in capsys.readouterr().err


def test_an_unfinished_warm_start_is_refused_by_name(native_emulator, tmp_path):
    with pytest.raises(FileNotFoundError, match="warm_start7 is not a finished warm start"):
        emulated_cpu.check_warm_start("smoke", tmp_path, "toolcall", 7, tmp_path / "work", "Haswell")
    assert not os.path.exists(tmp_path / "work")
