"""benchmarks/emulated_cpu.py: reruns a draw's jobs under an emulator and compares their bytes. Here the "emulator"
is a stand-in that runs the command natively, so a rerun on this machine must give the smoke draw's bytes (the
plumbing: which files, from which warm start, into which folder); the real emulator's check of the pin is
tests/test_kernels.py's."""

import json
import os
import stat
import subprocess
import sys
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
    # --allow-other-code: the plumbing is tested here, on whatever edits the checkout carries (CI's has none; the
    # refusals are tested below)
    code = emulated_cpu.main(["--experiment", "smoke", "--results", "results/smoke", "--warm-start", "toolcall/0",
                              "--run-dir", "results/smoke/runs/toolcall/dara_sym/G4/seed0", "--allow-other-code",
                              "--work", str(tmp_path / "work"), "--out", str(out)])
    page = out.read_text()
    assert code == 0, page
    rows = [line for line in page.splitlines() if line.startswith("| ") and "| yes |" in line]
    assert f"**{len(rows)} of {len(rows)} files byte-identical**" in page and "ATen AVX2, OpenBLAS Haswell" in page
    for name in ("model.safetensors", "tokenizer.json", "rollouts.parquet", "metrics.parquet (all but seconds)",
                 "eval/.../step0.json", "tables/claims.csv", "tables/first_crossing.csv", "REPORT.md"):
        assert name in page
    # the evaluation: every evaluated step of the run; the analysis: every table the workflow's analysis writes
    evaluated = [row for row in rows if row.startswith("| evaluation toolcall-dara_sym-G4-seed0 |")]
    assert len(evaluated) == len(list((ROOT / "results/smoke/eval/toolcall/dara_sym/G4/seed0").glob("*.json")))
    written = {path.name for path in (tmp_path / "work" / "analysis" / "tables").glob("*.csv")}
    assert written and written <= {path.name for path in (ROOT / "results/smoke/tables").glob("*.csv")}
    # the run was retrained into the work folder, from the draw's warm start, and the warm start remade there
    assert (tmp_path / "work" / "results" / "smoke" / "runs" / "toolcall" / "dara_sym" / "G4" / "seed0"
            / "metrics.parquet").exists()
    assert (tmp_path / "work" / "policies" / "toolcall" / "warm_start0" / "model.safetensors").exists()
    # a second call with the same --work reuses the finished warm start instead of emulating it again

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished job was emulated again")

    monkeypatch.setattr(emulated_cpu, "_run_emulated", must_not_run)
    rows = emulated_cpu.check_warm_start("smoke", ROOT / "results" / "smoke", "toolcall", 0, tmp_path / "work",
                                         "Haswell", True)
    assert all(row["draw"] == row["emulated"] for row in rows) and len(rows) == 2
    # ... and the finished run, with the timing of its first call
    experiment = emulated_cpu.load_experiment("smoke")
    rows = emulated_cpu.check_run(experiment, "results/smoke/runs/toolcall/dara_sym/G4/seed0", tmp_path / "work",
                                  "Haswell", True)
    assert all(row["draw"] == row["emulated"] for row in rows) and len(rows) == 3
    assert f"| {rows[0]['seconds']:.0f} |" in page
    # ... and its evaluation and the analysis
    rows = emulated_cpu.check_evaluation(experiment, "results/smoke/runs/toolcall/dara_sym/G4/seed0",
                                         tmp_path / "work", "Haswell", True)
    assert rows and all(row["draw"] == row["emulated"] for row in rows)
    rows = emulated_cpu.check_analysis("smoke", Path("results/smoke"), tmp_path / "work", "Haswell", True)
    assert len(rows) > 10 and all(row["draw"] == row["emulated"] for row in rows)
    # a table the workflow declares and the emulated jobs did not write (a script that exits 0 having written less)
    # is a differing row, not a row left out
    (tmp_path / "work" / "analysis" / "tables" / "table1.csv").unlink()
    rows = emulated_cpu.check_analysis("smoke", Path("results/smoke"), tmp_path / "work", "Haswell", True)
    assert [(row["draw"] == row["emulated"], row["emulated"]) for row in rows if row["file"] == "tables/table1.csv"] \
        == [(False, "not written")]
    # a record of other inputs (another draw, other settings) is not reused: the job runs again
    timing = tmp_path / "work" / "toolcall-dara_sym-G4-seed0.seconds.json"
    timing.write_text(json.dumps({**json.loads(timing.read_text()), "key": "another draw"}))
    with pytest.raises(AssertionError, match="a finished job was emulated again"):
        emulated_cpu.check_run(experiment, "results/smoke/runs/toolcall/dara_sym/G4/seed0", tmp_path / "work",
                               "Haswell", True)


def test_an_unfinished_emulated_run_starts_over(smoke_results, native_emulator, tmp_path, monkeypatch):
    """A run folder without its timing (a check killed mid-run) is retrained from scratch, not reused."""
    monkeypatch.chdir(ROOT)
    experiment = emulated_cpu.load_experiment("smoke")
    run_dir = "results/smoke/runs/toolcall/dara_sym/G4/seed0"
    leftover = tmp_path / "work" / run_dir
    leftover.mkdir(parents=True)
    (leftover / "metrics.parquet").write_text("a file from a killed job")
    rows = emulated_cpu.check_run(experiment, run_dir, tmp_path / "work", "Haswell", True)
    assert all(row["draw"] == row["emulated"] for row in rows) and len(rows) == 3
    record = json.loads((tmp_path / "work" / "toolcall-dara_sym-G4-seed0.seconds.json").read_text())
    assert record["seconds"] > 0 and "emulator" in record


def test_a_differing_file_fails_the_check_and_is_marked(monkeypatch, tmp_path, capsys):
    ran = "ATen AVX2, OpenBLAS Haswell"
    rows = [{"job": "run x", "file": "rollouts.parquet", "draw": "a" * 64, "emulated": "a" * 64, "seconds": 1.0,
             "ran": ran},
            {"job": "run x", "file": "checkpoints/step30/model.safetensors", "draw": "b" * 64, "emulated": "c" * 64,
             "seconds": 1.0, "ran": ran}]
    monkeypatch.setattr(emulated_cpu.shutil, "which", lambda name: "/usr/bin/true")
    monkeypatch.setattr(emulated_cpu, "check_run", lambda experiment, run_dir, work, cpu, allowed: rows)
    monkeypatch.setattr(emulated_cpu, "check_emulator", lambda cpu, work: None)
    monkeypatch.chdir(ROOT)
    code = emulated_cpu.main(["--experiment", "smoke", "--warm-start", "--run-dir", "results/smoke/runs/x",
                              "--evaluate-run-dir", "--no-analysis", "--work", str(tmp_path)])
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
    # this checkout's revision with uncommitted edits (or no word on them) is other code too
    with pytest.raises(RuntimeError, match="made at HEAD with uncommitted edits, which no record names"):
        emulated_cpu._refuse_other_code("HEAD", "results/tiny/runs/x", dirty=True)
    with pytest.raises(RuntimeError, match="without saying whether it had edits"):
        emulated_cpu._refuse_other_code("HEAD", "results/tiny/runs/x", dirty=None)
    assert emulated_cpu._refuse_other_code("HEAD", "x", allowed=True, dirty=True) == []
    assert emulated_cpu.code_label("0123456789abcdef", True) == "0123456+edits"
    assert emulated_cpu.code_label("0123456789abcdef", None) == "0123456+edits?"
    assert emulated_cpu.code_label("0123456789abcdef", False) == "0123456"
    # an emulated job reused from an earlier call is held to the same rule, by its own record
    with pytest.raises(RuntimeError, match="reused from an earlier call: work/runs/x was made at de659b2"):
        emulated_cpu._emulated_code("de659b2", False, "work/runs/x", allowed=False)
    with pytest.raises(RuntimeError, match=r"emulated by code with uncommitted edits \(this checkout's, or an earlier "
                                           r"call's\), which no record names: commit them and delete it from --work"):
        emulated_cpu._emulated_code("HEAD", True, "work/runs/x", allowed=False)  # edits no record names
    with pytest.raises(RuntimeError, match="emulated by code with uncommitted edits"):
        emulated_cpu._emulated_code("HEAD", None, "work/runs/x", allowed=False)  # a record that does not say
    assert emulated_cpu._emulated_code("HEAD", True, "work/runs/x", allowed=True) == ("HEAD+edits", [])
    assert emulated_cpu._emulated_code("HEAD", False, "work/runs/x", allowed=False) == ("HEAD", [])


@pytest.mark.parametrize("dirty", [False, True, None])
def test_a_reports_code_label_reads_back_with_its_edit_state(tmp_path, dirty):
    """REPORT.md names its code by `code_label`; read back, an unknown edit state stays unknown (not clean), and
    masking the revision leaves nothing of the label behind."""
    report = tmp_path / "REPORT.md"
    report.write_text(f"Generated by `analysis/report_md.py` at code revision "
                      f"{emulated_cpu.code_label('0123456789abcdef', dirty, width=12)}. Numbers.\n")
    assert emulated_cpu._report_revision(report) == ("0123456789ab", dirty)
    assert emulated_cpu.without_report_revision(report.read_text()) == (
        "Generated by `analysis/report_md.py` at code revision <revision>. Numbers.\n")
    report.write_text("no revision here\n")
    assert emulated_cpu._report_revision(report) == ("", False)


def test_an_emulated_job_that_ran_other_kernels_is_refused(tmp_path):
    """An emulator without AVX2 (QEMU before 7.2) would make ATen fall back to its default kernels: named, not
    reported as a difference the pin missed."""
    record = {"dispatch": {"aten_cpu_capability": "DEFAULT", "openblas_core": "Haswell"}}
    with pytest.raises(RuntimeError, match="ran ATen DEFAULT, OpenBLAS Haswell, not the pinned kernels"):
        emulated_cpu._checked_dispatch(record, tmp_path)
    pinned = {"dispatch": {"aten_cpu_capability": "AVX2", "openblas_core": "Haswell"}}
    assert emulated_cpu._checked_dispatch(pinned, tmp_path) == "ATen AVX2, OpenBLAS Haswell"


def test_the_emulator_probe_sorts_right_natively_and_a_failing_emulator_is_refused_by_name(monkeypatch, tmp_path):
    """The probe is numpy's int64 argsort checked for order: it passes on a real CPU; an emulator that fails it
    (QEMU 7.2 does, on its AVX2 path) is refused with the version that works, before any job runs."""
    for n in (10, 100000):
        done = subprocess.run([sys.executable, "-c", emulated_cpu._SORT_PROBE.format(sizes=(n,))], capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr
    broken = emulated_cpu._SORT_PROBE.format(sizes=(10,)).replace("a[a.argsort()]", "a")  # unsorted: must fail
    assert subprocess.run([sys.executable, "-c", broken], capture_output=True).returncode != 0

    def failing(command, cpu, log):
        raise RuntimeError("-c failed on the emulated CPU (exit 1)")

    monkeypatch.setattr(emulated_cpu, "_run_emulated", failing)
    monkeypatch.setattr(emulated_cpu, "emulator_version", lambda: "qemu-x86_64 version 7.2.22")
    with pytest.raises(RuntimeError, match=r"7\.2\.22 mis-executes numpy's AVX2 sort .*QEMU 8 or later"):
        emulated_cpu.check_emulator("Haswell", tmp_path)


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


def test_the_analysis_check_reads_the_draw_only_where_the_workflow_names_it(native_emulator, tmp_path):
    """The analysis jobs name the draw's files relative to the workflow (results/<scale>): a draw elsewhere would be
    checked against other inputs than the page says."""
    with pytest.raises(ValueError, match="results/smoke under"):
        emulated_cpu.check_analysis("smoke", tmp_path / "results" / "smoke", tmp_path / "work", "Haswell")


def test_an_analysis_command_that_writes_elsewhere_is_refused(tmp_path):
    command = ("python analysis/table1.py --scale tiny --out-dir results/tiny --metrics a b"
               " > results/tiny/logs/x.log 2>&1")
    assert emulated_cpu._redirected(command, "results/tiny", tmp_path) == [
        "analysis/table1.py", "--scale", "tiny", "--out-dir", str(tmp_path), "--metrics", "a", "b"]
    assert emulated_cpu._redirected("OMP_NUM_THREADS=1 " + command, "results/tiny", tmp_path)[0] == "analysis/table1.py"
    with pytest.raises(RuntimeError, match="does not write under results/smoke"):
        emulated_cpu._redirected(command, "results/smoke", tmp_path)


def test_an_evaluation_compares_everything_but_its_provenance(tmp_path):
    """Another code revision, machine, checkpoint folder or a step-0 copy note leave the digest alone; a score does
    not."""
    record = {"task": "toolcall", "checkpoint_sha256": "ab", "scores": {"accuracy": 0.5},
              "code_revision": {"revision": "1" * 40}, "machine": {"cpu": "A"}, "checkpoint": "results/x"}
    first, second, third = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_text(json.dumps(record))
    second.write_text(json.dumps({**record, "code_revision": {"revision": "2" * 40}, "machine": {"cpu": "B"},
                                  "checkpoint": "/tmp/y", "copied_from": "policies/z"}))
    third.write_text(json.dumps({**record, "scores": {"accuracy": 0.51}}))
    digest = emulated_cpu._evaluation_digest
    assert digest(first) == digest(second) and digest(first) != digest(third)


def test_an_unfinished_warm_start_is_refused_by_name(native_emulator, tmp_path):
    with pytest.raises(FileNotFoundError, match="warm_start7 is not a finished warm start"):
        emulated_cpu.check_warm_start("smoke", tmp_path, "toolcall", 7, tmp_path / "work", "Haswell")
    assert not os.path.exists(tmp_path / "work")
