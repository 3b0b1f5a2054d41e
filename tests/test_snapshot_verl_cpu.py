"""The cost tables that `make snapshot` writes (after `make reproduce`, after `make verl-cpu`) count what the run
left."""

from pathlib import Path

import pytest

from script_loader import load_script


def _run(folder: Path, revision: str, dirty: str = "false") -> None:
    folder.mkdir(parents=True)
    (folder / "metrics.parquet").write_bytes(b"")
    (folder / "git_revision.txt").write_text(f"revision: {revision}\ndirty: {dirty}\n")


def _benchmark(path: Path, seconds: float, max_rss: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("s\th:m:s\tmax_rss\n" f"{seconds}\t0:00:00\t{max_rss}\n")


def test_the_verl_cpu_table_counts_runs_per_backend_job_time_memory_and_revision(tmp_path):
    results = tmp_path / "verl_cpu"
    for method in ("grpo", "dara_asym"):
        _run(results / "runs" / "toolcall-tiny_tool" / method / "G4" / "seed0", "a" * 40)
        _run(results / "runs" / "toolcall" / method / "G4" / "seed0", "a" * 40)  # the analysis's view of it
        _run(results / "tiny" / "runs" / "toolcall" / method / "G4" / "seed0", "a" * 40)
    _run(results / "tiny" / "runs" / "math_length" / "grpo" / "G4" / "seed0", "a" * 40)
    _run(results / "tiny" / "runs" / "math_length" / "gdpo" / "G4" / "seed0", "a" * 40, dirty="true")
    _run(results / "tiny" / "runs" / "math_length" / "dvao" / "G4" / "seed0", "a" * 40, dirty="unknown")
    _benchmark(results / "benchmarks" / "train" / "toolcall_grpo_G4_seed0.tsv", 200.0, 6144.0)
    _benchmark(results / "benchmarks" / "train" / "toolcall_dara_asym_G4_seed0.tsv", 240.0, 5120.0)
    _benchmark(results / "benchmarks" / "train" / "toolcall_grpo_G4.tsv", 30.0, 900.0)  # a tiny-trainer seed group
    _benchmark(results / "benchmarks" / "warm_start" / "toolcall.tsv", 90.0, 800.0)
    (results / "run_seconds.txt").write_text("1830 seconds; started from an empty results/verl_cpu: yes\n")

    table = load_script("analysis/snapshot.py").verl_cpu_timing_table(results)

    assert "| 30 min 30 s |" in table
    assert "| started from an empty `results/verl_cpu` | yes |" in table
    assert "| every job's time, summed | 9 min 20 s |" in table  # 200 + 240 + 30 + 90 s
    assert "| verl runs / tiny-trainer runs | 2 / 5 |" in table
    assert "| 200-240 s |" in table  # verl jobs only (<job>_seed<S>.tsv)
    assert "| 6.0 GB |" in table
    # the same revision with uncommitted edits is other code, and says so; so does one whose record does not say
    assert f"| code revision of the runs | {'a' * 10}, {'a' * 10}+edits, {'a' * 10}+edits? |" in table


def test_the_tiny_table_sums_every_jobs_time_per_stage(tmp_path):
    results = tmp_path / "tiny"
    for seed in (0, 1):
        _run(results / "runs" / "toolcall" / "gdpo" / "G4" / f"seed{seed}", "c" * 40)
    _benchmark(results / "benchmarks" / "train" / "toolcall_gdpo_G4.tsv", 300.0, 900.0)
    _benchmark(results / "benchmarks" / "train" / "math_length_gdpo_G8.tsv", 420.0, 900.0)
    _benchmark(results / "benchmarks" / "evaluate" / "toolcall_G4.tsv", 66.0, 900.0)
    _benchmark(results / "benchmarks" / "warm_start" / "toolcall.tsv", 90.0, 800.0)
    (results / "reproduce_seconds.txt").write_text("1000 seconds; started from an empty results/tiny: no\n")

    table = load_script("analysis/snapshot.py").timing_table(results)

    assert "| 16 min 40 s |" in table
    assert "| started from an empty `results/tiny` | no (a partial rerun) |" in table
    assert "| training runs | 2 |" in table
    assert "| every job's time, summed | 14 min 36 s |" in table  # 300 + 420 + 66 + 90 s
    assert "| train 12.0, warm_start 1.5, evaluate 1.1 |" in table  # minutes, largest first


@pytest.mark.parametrize("folder", ["benchmarks", "reproduce_benchmarks"])
def test_the_tiny_table_keeps_opt_in_jobs_out_of_make_reproduces_time(tmp_path, folder):
    """From the workflow's benchmarks/, or from the copy make reproduce leaves when it finishes, whichever exists
    (the copy first: later jobs, an analysis redrawn on the same runs, rewrite benchmarks/)."""
    results = tmp_path / "tiny"
    _run(results / "runs" / "toolcall" / "gdpo" / "G4" / "seed0", "c" * 40)
    _benchmark(results / folder / "train" / "toolcall_gdpo_G4.tsv", 300.0, 900.0)
    _benchmark(results / folder / "opt_in" / "train" / "trl_toolcall_gdpo_G4.tsv", 500.0, 900.0)
    _benchmark(results / folder / "opt_in" / "train" / "trl_toolcall_dara_sym_G4.tsv", 100.0, 900.0)
    if folder != "benchmarks":  # the workflow's folder after a later analysis rerun: not the draw's cost
        _benchmark(results / "benchmarks" / "analysis" / "regime.tsv", 600.0, 900.0)
    (results / "reproduce_seconds.txt").write_text("400 seconds; started from an empty results/tiny: yes\n")

    table = load_script("analysis/snapshot.py").timing_table(results)

    assert "| every job's time, summed | 5 min 0 s |" in table  # the trl jobs are not make reproduce's
    assert f"| per stage ({folder}/ folder), minutes | train 5.0 |" in table
    assert "| opt-in targets' jobs (run by target name, not by `make reproduce`), summed | 10 min 0 s |" in table


def test_the_tiny_table_has_no_opt_in_row_when_no_opt_in_target_ran(tmp_path):
    results = tmp_path / "tiny"
    _run(results / "runs" / "toolcall" / "gdpo" / "G4" / "seed0", "c" * 40)
    _benchmark(results / "benchmarks" / "train" / "toolcall_gdpo_G4.tsv", 300.0, 900.0)
    (results / "reproduce_seconds.txt").write_text("400 seconds; started from an empty results/tiny: yes\n")

    assert "opt-in" not in load_script("analysis/snapshot.py").timing_table(results)


def test_revision_lists_each_other_backends_run_revisions_once(tmp_path):
    results = tmp_path / "tiny"
    _run(results / "runs" / "toolcall" / "gdpo" / "G4" / "seed0", "a" * 40)  # the scale's own: not listed here
    _run(results / "trl" / "runs" / "toolcall" / "gdpo" / "G4" / "seed0", "b" * 40)
    _run(results / "trl" / "runs" / "toolcall" / "gdpo" / "G4" / "seed1", "b" * 40)
    _run(results / "trl" / "runs" / "toolcall" / "dara_sym" / "G4" / "seed0", "c" * 40)
    snapshot = load_script("analysis/snapshot.py")

    text = snapshot.other_backend_revisions(results)

    assert text.splitlines()[0] == "# trl runs (backends.md)"
    assert [line for line in text.splitlines() if line.startswith("revision:")] == [f"revision: {'b' * 40}",
                                                                                    f"revision: {'c' * 40}"]
    assert snapshot.other_backend_revisions(tmp_path / "empty") == ""


def test_a_verl_cpu_run_without_training_benchmarks_is_refused(tmp_path):
    results = tmp_path / "verl_cpu"
    _run(results / "runs" / "toolcall-tiny_tool" / "grpo" / "G4" / "seed0", "b" * 40)
    (results / "run_seconds.txt").write_text("60 seconds; started from an empty results/verl_cpu: no\n")
    with pytest.raises(SystemExit, match="no verl training benchmarks"):
        load_script("analysis/snapshot.py").verl_cpu_timing_table(results)


def test_a_snapshot_takes_only_the_scales_that_finished(tmp_path):
    """After make verl-cpu alone the tiny scale's snapshot files stay as they are (and the reverse); with neither
    scale finished there is nothing to take."""
    snapshot_module = load_script("analysis/snapshot.py")
    snapshot, readme = tmp_path / "snapshot", tmp_path / "README.md"
    snapshot.mkdir()
    readme.write_text("no blocks\n")
    (snapshot / "headline.md").write_text("the tiny scale's, kept\n")
    taken = []
    snapshot_module.take_verl_cpu_snapshot = lambda results, out: taken.append(results)
    verl_cpu = tmp_path / "verl_cpu"
    verl_cpu.mkdir()
    (verl_cpu / "run_seconds.txt").write_text("60 seconds; started from an empty results/verl_cpu: yes\n")
    arguments = ["--results", str(tmp_path / "tiny"), "--snapshot", str(snapshot), "--readme", str(readme),
                 "--docs", str(tmp_path / "docs")]
    snapshot_module.main([*arguments, "--verl-cpu-results", str(verl_cpu)])
    assert taken == [verl_cpu] and (snapshot / "headline.md").read_text() == "the tiny scale's, kept\n"
    with pytest.raises(SystemExit, match="nothing to snapshot"):
        snapshot_module.main([*arguments, "--verl-cpu-results", str(tmp_path / "absent")])
