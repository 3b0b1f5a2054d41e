"""Rerun jobs of a finished tiny draw on an emulated CPU of another type and vendor, and compare their bytes.

Why: the kernel pin (`dara.kernels`) is meant to make a run write the same bytes on every x86-64 CPU with AVX2 and
FMA, but one machine has one CPU type. QEMU's user-mode emulator (``qemu-user``, 8 or later: `check_emulator`)
runs this machine's Python as another CPU, emulating every instruction: with ``-cpu Haswell`` an Intel CPU (vendor
GenuineIntel) with AVX2 and FMA and no AVX-512, so ATen, MKL, OpenBLAS and numpy dispatch as they would there,
vendor checks included. QEMU computes each IEEE operation to the bits any CPU gives, and the approximate reciprocal
instructions (rcpps, rsqrtps), whose tables differ between Intel and AMD, to full float32 precision, as no CPU
does: a result that depends on the vendor's dispatch or on those tables comes out different here. What it cannot
show: a CPU whose IEEE arithmetic were wrong, or AVX-512 (QEMU does not emulate it; under the pin no library
takes it anyway).

It reruns, pinned, under the emulator:
- a warm start of the draw (`dara.tiny.warmstart`), compared with the draw's policy (weights and tokenizer);
- runs of the draw (`dara.tiny.trainer`), each from the draw's own warm start, compared with the draw's run: metrics
  (but the wall time), every rollout, the last checkpoint's weights;
- the held-out evaluation of those runs (`dara.evaluation.tiny_heldout`) on the draw's own checkpoints, compared
  file by file but for each file's provenance;
- every analysis script of the workflow (``python analysis/*.py``, as a forced dry run of the workflow lists them;
  not the diagnostics of ``dara diagnose``) on the draw's runs and evaluations, compared on every table, figure data
  file and REPORT.md they write.

The rerun uses this checkout's code, so the check refuses a draw made by other code under ``src/`` (and, for the
analysis, ``analysis/``), and a job reused from an earlier call that other code made: a check of old bytes against
new code says nothing about the CPU. Each emulated job's own record of its dispatch must say the pinned AVX2
kernels ran (an emulator without AVX2 would fall back to others); the jobs' ``machine.json`` names the host's CPU,
since QEMU's user mode passes the host's ``/proc/cpuinfo`` through.

An emulated job takes 10 to 200 times as long as a native one (the products' AVX2 arithmetic is emulated element by
element): a toolcall warm start about two hours, a toolcall run about fifteen minutes. A job finished in an earlier
call with the same ``--work`` is reused (each keeps its wall time beside it); an unfinished one starts over.
``make check-emulated-cpu`` runs the default selection against ``results/tiny`` and writes
``docs/results/emulated_cpu.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from dara import kernels
from dara.experiments import load_experiment
from dara.io import write_text_atomic
from dara.provenance import (
    code_label,
    git_revision,
    read_machine,
    read_revision_record,
    report_revision,
    without_report_revision,
)
from dara.runs import find_run_by_dir

EMULATOR = "qemu-x86_64"
DEFAULT_CPU = "Haswell"
# What the page says a QEMU CPU model is (another model is named as it is)
CPU_MODELS = {"Haswell": "an Intel CPU (vendor GenuineIntel) with AVX2 and FMA, no AVX-512",
              "EPYC-Rome": "an AMD CPU (Zen 2) with AVX2 and FMA, no AVX-512"}
# What the default check reruns (under --results): the headline task's first warm start, a run of it and a run of
# the math task (the other claim task), each run from the draw's own warm start.
DEFAULT_WARM_STARTS = ("toolcall/0",)
DEFAULT_RUNS = ("runs/toolcall/dara_sym/G4/seed0", "runs/math_length/dara_sym/G8/seed0")
# Variables that would make the libraries imitate another CPU inside the emulated one (tests set them)
IMITATIONS = ("MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE")
# The checkout whose code reruns the jobs (git runs there whatever the working directory)
REPOSITORY = Path(__file__).resolve().parents[1]
# An emulated job's ceiling: a stuck emulator fails the check instead of hanging it
JOB_TIMEOUT_SECONDS = 3 * 3600


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run_emulated(command: list[str], cpu: str, log: Path, cwd: Path | None = None) -> float:
    """``command`` (a Python module's or script's arguments) on the emulated CPU, pinned, in ``cwd`` (default: this
    process's); its output in ``log``; the wall seconds."""
    inherited = {key: value for key, value in os.environ.items() if key not in IMITATIONS}
    environment = kernels.pinned_environment({**inherited, "OMP_NUM_THREADS": "1"})
    start = time.monotonic()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        done = subprocess.run([EMULATOR, "-cpu", cpu, sys.executable, *command], env=environment, stdout=out,
                              stderr=subprocess.STDOUT, timeout=JOB_TIMEOUT_SECONDS, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} failed on the emulated CPU (exit {done.returncode}); see {log}")
    return time.monotonic() - start


def _emulated_code(revision: str, dirty: bool | None, what: str, allowed: bool, code: tuple[str, ...] = ("src",)
                   ) -> tuple[str, list[str]]:
    """The code an emulated job ran (its own record: a job can be reused from an earlier call, made by other code
    than this checkout's), held to `_refuse_other_code`'s rule: its short name for the page, and the files that
    differ."""
    try:
        changed = _refuse_other_code(revision, what, allowed, code)
    except RuntimeError as error:
        raise RuntimeError(f"an emulated job reused from an earlier call: {error}; delete it from --work to rerun it "
                           "with this checkout's code") from None
    if dirty is not False and not allowed:
        raise RuntimeError(f"{what} was emulated by code with uncommitted edits (this checkout's, or an earlier "
                           "call's), which no record names: commit them and delete it from --work to rerun it, or pass "
                           "--allow-other-code where the edits cannot touch the bytes")
    return code_label(revision, dirty), changed


def emulator_version() -> str:
    """The first line of `EMULATOR`'s ``--version`` (QEMU's version and its build)."""
    done = subprocess.run([EMULATOR, "--version"], capture_output=True, text=True)
    return done.stdout.splitlines()[0].strip() if done.returncode == 0 and done.stdout else "unknown"


# numpy's AVX2 sort of 64-bit integers (x86-simd-sort), which pandas' grouping and pivoting call: QEMU 7.2's AVX2
# emulation returns a wrong order or crashes on it (measured with Debian 12's 7.2.22; QEMU 10.0 sorts it right, and
# so does every CPU natively), so an emulator is tried on it before any job runs
_SORT_PROBE = ("import numpy as np\nfor n in {sizes}:\n    a = np.random.default_rng(0).integers(0, 1000, n)"
               ".astype(np.int64)\n    o = a[a.argsort()]\n"
               "    assert (o[1:] >= o[:-1]).all(), f'argsort of {{n}} int64 values out of order'")
# 7.2 got 10 and 100,000 values wrong and crashed elsewhere; the sizes span numpy's small and large sort paths
_SORT_PROBE_SIZES = (10, 1000, 100000)


def check_emulator(cpu: str, work: Path) -> None:
    """Refuse an emulator that mis-executes AVX2 code the jobs run (`_SORT_PROBE`, one emulated interpreter for every
    size: its start-up is most of the probe's time), naming a version that works."""
    log = work / "emulator_probe.log"
    try:
        _run_emulated(["-c", _SORT_PROBE.format(sizes=_SORT_PROBE_SIZES)], cpu, log)
    except RuntimeError:
        raise RuntimeError(f"{emulator_version()} mis-executes numpy's AVX2 sort of 64-bit integers under -cpu {cpu} "
                           f"(see {log}: the sizes it got wrong): QEMU 7.2's AVX2 emulation is known to; use QEMU 8 "
                           "or later (Debian 12: qemu-user from bookworm-backports, 10.0) and pass its qemu-x86_64 "
                           "as --emulator") from None


def _job_key(*parts, files: tuple[Path, ...] = ()) -> str:
    """What a job was run on, as a hash: its arguments and settings (``parts``) and the bytes of the draw's files it
    reads (``files``), so that a job of an earlier call is reused only for the same draw and settings."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode())
    for path in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _finished(timing: Path, key: str, *outputs: Path) -> dict | None:
    """A job finished in an earlier call with the same work folder, on the same inputs: its record (wall seconds and
    the emulator that ran it) where the record (written after the job's outputs) names ``key`` and every output
    exists; else None, and the job runs again from scratch."""
    if timing.exists() and all(path.exists() for path in outputs):
        record = json.loads(timing.read_text())
        if record.get("key") == key:
            return record
    return None


def _record(timing: Path, seconds: float, key: str) -> dict:
    """Keep a finished job's wall seconds, emulator and inputs' key beside it (`_finished` reads them)."""
    record = {"seconds": seconds, "emulator": emulator_version(), "key": key}
    write_text_atomic(timing, json.dumps(record) + "\n")
    return record


def _checked_dispatch(record: dict, where: Path) -> str:
    """The kernels an emulated job's record says it ran, refused unless they are the pin's."""
    dispatch = record["dispatch"]
    ran = f"ATen {dispatch['aten_cpu_capability']}, OpenBLAS {dispatch['openblas_core']}"
    if (dispatch["aten_cpu_capability"] != kernels.PINNED_CAPABILITY
            or dispatch["openblas_core"] != kernels.PIN["OPENBLAS_CORETYPE"]):
        raise RuntimeError(f"{where} ran {ran}, not the pinned kernels: does this emulator support AVX2 and FMA "
                           f"(QEMU 8 or later)?")
    return ran


def _refuse_other_code(revision: str, what: str, allowed: bool = False, code: tuple[str, ...] = ("src",),
                       dirty: bool | None = False) -> list[str]:
    """Refuse a job's output made by code other than this checkout's under ``code`` (src/; the analysis adds its
    scripts), or by a checkout with uncommitted edits (``dirty``: which edits, no record names): its bytes could
    differ for that alone, unless ``allowed``; returns the files that differ (for the page)."""
    if not revision or revision == "unknown":
        raise RuntimeError(f"{what} records no code revision: cannot tell whether this checkout's code made it")
    diff = subprocess.run(["git", "diff", "--name-only", revision, "HEAD", "--", *code], capture_output=True,
                          text=True, cwd=REPOSITORY)
    if diff.returncode != 0:
        raise RuntimeError(f"{what} was made at {revision[:7]}, which is not in this checkout's history")
    changed = diff.stdout.split()
    if changed and not allowed:
        raise RuntimeError(f"{what} was made at {revision[:7]}, whose {'/, '.join(code)}/ differs from this checkout's "
                           f"({', '.join(changed)}): rerun make reproduce at this revision, check out that one, or "
                           "pass --allow-other-code where the changes cannot touch the bytes (the page lists them)")
    if dirty is not False and not allowed:
        state = "with uncommitted edits, which no record names" if dirty else "without saying whether it had edits"
        raise RuntimeError(f"{what} was made at {revision[:7]} {state}: rerun make reproduce from a clean checkout, "
                           "or pass --allow-other-code where the edits cannot touch the bytes")
    return changed


def check_warm_start(experiment: str, results: Path, task: str, index: int, work: Path, cpu: str,
                     allow_other_code: bool = False) -> list[dict]:
    """Rerun warm start ``index`` of ``task``; rows comparing its files with the draw's."""
    drawn = results / "policies" / task / f"warm_start{index}"
    if not (drawn / "warmstart.json").exists():
        raise FileNotFoundError(f"{drawn} is not a finished warm start (run make reproduce first)")
    made = json.loads((drawn / "warmstart.json").read_text()).get("git_revision", {})
    changed = _refuse_other_code(made.get("revision", ""), str(drawn), allow_other_code, dirty=made.get("dirty"))
    draw_at = code_label(made["revision"], made.get("dirty"))
    out = work / "policies" / task / f"warm_start{index}"
    # an emulated warm start takes hours: one finished in an earlier call with this --work is reused (warmstart.json
    # is written last, atomically), with its record
    command = ["-m", "dara.tiny.warmstart", "--experiment", experiment, "--task", task, "--warm-start", str(index),
               "--out", str(out)]
    key = _job_key(command, load_experiment(experiment).get("warm_start"), files=(drawn / "warmstart.json",))
    job = _finished(work / f"warm_start_{task}{index}.seconds.json", key, out / "warmstart.json")
    if job is None:
        shutil.rmtree(out, ignore_errors=True)
        job = _record(work / f"warm_start_{task}{index}.seconds.json",
                      _run_emulated(command, cpu, work / f"warm_start_{task}{index}.log"), key)
    record = json.loads((out / "warmstart.json").read_text())
    ran = _checked_dispatch(record["machine"], out)
    emulated_at, emulated_changed = _emulated_code(record["git_revision"]["revision"], record["git_revision"]["dirty"],
                                                   str(out), allow_other_code)
    return [{"job": f"warm start {task}/{index}", "file": name, "draw": _sha256(drawn / name),
             "emulated": _sha256(out / name), **job, "ran": ran, "draw_at": draw_at,
             "changed": sorted({*changed, *emulated_changed}), "emulated_at": emulated_at}
            for name in ("model.safetensors", "tokenizer.json")]


def _metrics_digest(folder: Path) -> str:
    """A hash of a run's metrics table but its wall time: values, index, column names and dtypes."""
    frame = pd.read_parquet(folder / "metrics.parquet").drop(columns="seconds")
    header = json.dumps([list(frame.columns), frame.dtypes.astype(str).tolist()]).encode()
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=True).values.tobytes() + header).hexdigest()


def check_run(experiment: dict, run_dir: str, work: Path, cpu: str, allow_other_code: bool = False) -> list[dict]:
    """Rerun the run in ``run_dir`` from the draw's warm start into ``work``; rows comparing it with the draw's."""
    drawn = find_run_by_dir(experiment, run_dir)
    drawn_dir = Path(drawn.run_dir)
    if not (drawn_dir / "metrics.parquet").exists():
        raise FileNotFoundError(f"{drawn_dir} has no metrics.parquet (run make reproduce first)")
    made = read_revision_record(drawn_dir)
    changed = _refuse_other_code(made["revision"], str(drawn_dir), allow_other_code, dirty=made["dirty"])
    draw_at = code_label(made["revision"], made["dirty"])
    rerun = dataclasses.replace(drawn, results=str(work / "results"))
    rerun_dir = Path(rerun.run_dir)
    timing = work / f"{drawn.name}.seconds.json"
    # an emulated run takes ten minutes to an hour: one finished in an earlier call with this --work is reused (the
    # trainer writes metrics.parquet last); one left unfinished starts over, so that the page times one whole job
    command = ["-m", "dara.tiny.trainer", "--no-progress", "--run", rerun.to_json(), "--policy", str(drawn.policy_dir)]
    key = _job_key(command, files=(Path(drawn.policy_dir) / "model.safetensors",))
    job = _finished(timing, key, rerun_dir / "metrics.parquet")
    if job is None:
        shutil.rmtree(rerun_dir, ignore_errors=True)
        job = _record(timing, _run_emulated(command, cpu, work / f"{drawn.name}.log"), key)
    ran = _checked_dispatch(read_machine(rerun_dir), rerun_dir)
    emulated = read_revision_record(rerun_dir)
    emulated_at, emulated_changed = _emulated_code(emulated["revision"], emulated["dirty"], str(rerun_dir),
                                                   allow_other_code)
    changed = sorted({*changed, *emulated_changed})
    weights = f"checkpoints/step{drawn.checkpoint_steps[-1]}/model.safetensors"  # the last, the run's settings say
    compared = [("metrics.parquet (all but seconds)", _metrics_digest(drawn_dir), _metrics_digest(rerun_dir)),
                ("rollouts.parquet", _sha256(drawn_dir / "rollouts.parquet"), _sha256(rerun_dir / "rollouts.parquet")),
                (weights, _sha256(drawn_dir / weights), _sha256(rerun_dir / weights))]
    return [{"job": f"run {drawn.name}", "file": name, "draw": draw, "emulated": emulated, **job, "ran": ran,
             "draw_at": draw_at, "changed": changed, "emulated_at": emulated_at}
            for name, draw, emulated in compared]


def _evaluation_digest(path: Path) -> str:
    """A hash of an evaluation file but its provenance: the code revision and machine that made it, the path of the
    checkpoint (another folder here; its SHA-256 stays in) and, at step 0, the warm-start evaluation the workflow
    copied it from (the rerun evaluates that checkpoint itself)."""
    record = json.loads(path.read_text())
    for key in ("code_revision", "machine", "checkpoint", "copied_from"):
        record.pop(key, None)
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


def check_evaluation(experiment: dict, run_dir: str, work: Path, cpu: str,
                     allow_other_code: bool = False) -> list[dict]:
    """Rerun the held-out evaluation of the run in ``run_dir`` on the draw's own checkpoints; rows comparing each
    evaluation file with the draw's (`_evaluation_digest`)."""
    drawn = find_run_by_dir(experiment, run_dir)
    drawn_files = [Path(path) for path in drawn.eval_files]
    missing = [str(path) for path in drawn_files if not path.exists()]
    if missing:
        raise FileNotFoundError(f"the draw has no evaluation {', '.join(missing)} (run make reproduce first)")
    # the last step's file: step 0's is a copy of the warm start's evaluation, made by that job
    made = json.loads(drawn_files[-1].read_text()).get("code_revision", {})
    changed = _refuse_other_code(made.get("revision", ""), str(drawn_files[-1]), allow_other_code,
                                 dirty=made.get("dirty"))
    draw_at = code_label(made["revision"], made.get("dirty"))
    # the draw's run folder where the rerun's results tree expects it: the evaluation reads its checkpoints there
    # and writes its files beside them, into the work folder
    rerun = dataclasses.replace(drawn, results=str(work / "evaluation"))
    link, target = Path(rerun.run_dir), Path(drawn.run_dir).resolve()
    if link.is_symlink() and link.resolve() != target:
        link.unlink()  # a link left by an earlier call to another folder (or to nothing)
    if not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target, target_is_directory=True)
    timing = work / f"evaluate-{drawn.name}.seconds.json"
    evaluation = json.dumps(experiment["evaluation"], sort_keys=True)
    command = ["-m", "dara.evaluation.tiny_heldout", "--run", rerun.to_json(), "--evaluation", evaluation]
    checkpoints = tuple(sorted(Path(drawn.run_dir).glob("checkpoints/step*/model.safetensors")))
    key = _job_key(command, files=checkpoints)
    job = _finished(timing, key, *map(Path, rerun.eval_files))  # reused as a run is
    if job is None:
        for path in rerun.eval_files:
            Path(path).unlink(missing_ok=True)
        job = _record(timing, _run_emulated(command, cpu, work / f"evaluate-{drawn.name}.log"), key)
    rows = []
    for drawn_file, rerun_file in zip(drawn_files, map(Path, rerun.eval_files)):
        record = json.loads(rerun_file.read_text())
        ran = _checked_dispatch(record["machine"], rerun_file)
        emulated_at, emulated_changed = _emulated_code(record["code_revision"]["revision"],
                                                       record["code_revision"]["dirty"], str(rerun_file),
                                                       allow_other_code)
        rows.append({"job": f"evaluation {drawn.name}", "file": f"eval/.../{drawn_file.name}",
                     "draw": _evaluation_digest(drawn_file), "emulated": _evaluation_digest(rerun_file),
                     **job, "ran": ran, "draw_at": draw_at,
                     "changed": sorted({*changed, *emulated_changed}), "emulated_at": emulated_at})
    return rows


# An analysis job's command as the workflow writes it: the script under analysis/, one thread or unset
_ANALYSIS_COMMAND = re.compile(r"^(OMP_NUM_THREADS=\d+ )?python analysis/\w+\.py ")


def analysis_jobs(experiment: str) -> list[tuple[str, list[str]]]:
    """The shell command and declared outputs of each of the workflow's analysis jobs, as a forced dry run of the
    whole workflow prints them (``snakemake --dry-run --printshellcmds --forceall``): the workflow's own commands,
    inputs and outputs, not a restatement of its rules. The report comes last (it reads the other tables)."""
    snakemake = Path(sys.executable).with_name("snakemake")
    done = subprocess.run([str(snakemake), "--dry-run", "--printshellcmds", "--forceall", "--cores", "1", "--config",
                           f"scale={experiment}"], cwd=REPOSITORY, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"snakemake's dry run failed:\n{(done.stdout + done.stderr)[-3000:]}")
    jobs: dict[str, list[str]] = {}
    outputs: list[str] = []
    for line in (line.strip() for line in done.stdout.splitlines()):
        if line.startswith(("rule ", "localrule ")):
            outputs = []  # a job's block: its rule, its input, output, log... and last its shell command
        elif line.startswith("output: "):
            outputs = line.removeprefix("output: ").split(", ")
        elif _ANALYSIS_COMMAND.match(command := line.removeprefix("Shell command:").strip()):
            jobs[command] = outputs
    if not jobs:
        raise RuntimeError("snakemake's dry run listed no analysis job (python analysis/...)")
    return sorted(jobs.items(), key=lambda job: ("report_md" in job[0], job[0]))


def _redirected(command: str, results: str, out: Path) -> list[str]:
    """The arguments after ``python`` of an analysis command, writing under ``out`` instead of ``results`` (its log
    is the emulated job's own)."""
    argv = shlex.split(command.partition(" > ")[0])
    if argv[0].startswith("OMP_NUM_THREADS="):
        argv = argv[1:]  # every emulated job runs on one thread
    if "--out-dir" not in argv or argv[argv.index("--out-dir") + 1] != results:
        raise RuntimeError(f"an analysis command that does not write under {results}: {command}")
    argv[argv.index("--out-dir") + 1] = str(out)
    return argv[1:]


def _report_revision(path: Path) -> tuple[str, bool | None]:
    """The revision REPORT.md names and whether it carried edits (None: not known); ("", False) where it names
    none."""
    return report_revision(path.read_text()) or ("", False)


def _report_digest(path: Path) -> str:
    """A hash of REPORT.md but the code revision its first lines name."""
    return hashlib.sha256(without_report_revision(path.read_text()).encode()).hexdigest()


def check_analysis(experiment: str, results: Path, work: Path, cpu: str, allow_other_code: bool = False) -> list[dict]:
    """Rerun every analysis job of the workflow on the draw's runs and evaluations, writing under ``work``; rows
    comparing each table, figure data file and the report with the draw's. The jobs name the draw's files relative
    to the workflow (``results/<scale>``), so ``results`` must be that folder of this checkout."""
    relative = f"results/{experiment}"
    if results.resolve() != (REPOSITORY / relative).resolve():
        raise ValueError(f"the analysis check reads the draw where the workflow's jobs name it, {relative} under "
                         f"{REPOSITORY}; got --results {results}")
    report = REPOSITORY / relative / "REPORT.md"
    if not report.exists():
        raise FileNotFoundError(f"{report} is missing (run make reproduce first)")
    revision, dirty = _report_revision(report)
    changed = _refuse_other_code(revision, str(report), allow_other_code, code=("src", "analysis"), dirty=dirty)
    draw_at = code_label(revision, dirty)
    out = work / "analysis"
    # what the emulated analysis dispatched to: one emulated interpreter's record (the scripts record none)
    record = work / "analysis_machine.json"
    timing = work / "analysis.seconds.json"
    # the whole analysis is one job: reused once finished (the report is written last), else rerun whole, so that
    # no table is left from another call
    jobs = analysis_jobs(experiment)
    commands = [command for command, _ in jobs]
    # the draw's files the jobs read: every existing file their commands name
    inputs = sorted({REPOSITORY / token for command in commands for token in shlex.split(command.partition(" > ")[0])
                     if token.startswith(relative + "/") and (REPOSITORY / token).is_file()})
    key = _job_key(commands, files=tuple(inputs))
    job = _finished(timing, key, record, out / "REPORT.md")
    if job is None:
        shutil.rmtree(out, ignore_errors=True)
        seconds = _run_emulated(["-c", "import json; from dara.kernels import machine_record; "
                                 f"open({str(record)!r}, 'w').write(json.dumps(machine_record()))"], cpu,
                                work / "analysis_machine.log")
        for command in commands:
            argv = _redirected(command, relative, out)
            seconds += _run_emulated(argv, cpu, work / "analysis_logs" / f"{Path(argv[0]).stem}.log",
                                     cwd=REPOSITORY)  # the jobs name the draw's files relative to the workflow
        job = _record(timing, seconds, key)
    ran = _checked_dispatch(json.loads(record.read_text()), record)
    emulated_revision, emulated_dirty = _report_revision(out / "REPORT.md")
    emulated_at, emulated_changed = _emulated_code(emulated_revision, emulated_dirty, str(out / "REPORT.md"),
                                                   allow_other_code, code=("src", "analysis"))
    changed = sorted({*changed, *emulated_changed})
    # every table and figure data file the jobs declare, and any other the emulated jobs wrote: a job that exits 0
    # without writing a declared file (Snakemake would fail it) shows as a differing row
    declared = {Path(output).relative_to(relative).as_posix() for _, outputs in jobs for output in outputs
                if output.startswith((f"{relative}/tables/", f"{relative}/figures/"))}
    written = {path.relative_to(out).as_posix() for folder in ("tables", "figures")
               for path in (out / folder).glob("*")}
    rows = []
    for name in sorted(name for name in declared | written if Path(name).suffix in (".csv", ".md")):
        drawn, emulated = REPOSITORY / relative / name, out / name
        rows.append({"job": "analysis", "file": name,
                     "draw": _sha256(drawn) if drawn.exists() else "missing in the draw",
                     "emulated": _sha256(emulated) if emulated.exists() else "not written"})
    rows.append({"job": "analysis", "file": "REPORT.md (but its code revision)", "draw": _report_digest(report),
                 "emulated": _report_digest(out / "REPORT.md")})
    return [{**row, **job, "ran": ran, "draw_at": draw_at, "changed": changed,
             "emulated_at": emulated_at} for row in rows]


def _short_version(version: str) -> str:
    """"QEMU 10.0.2" for QEMU's ``--version`` line; anything else as it is."""
    found = re.search(r"qemu-x86_64 version (\S+)", version)
    return f"QEMU {found.group(1)}" if found else version


def render(rows: list[dict], cpu: str, command: str) -> str:
    """The Markdown page: what ran, each file's two hashes, and the verdict."""
    here = git_revision()
    draw_revisions = sorted({row["draw_at"] for row in rows if row.get("draw_at")}) or ["unknown"]
    emulated_revisions = sorted({row["emulated_at"] for row in rows if row.get("emulated_at")}) or ["unknown"]
    changed = sorted({name for row in rows for name in row.get("changed", ())})
    code = ("all of them this checkout's code" if not changed else
            f"whose code differs from this checkout's in {', '.join(f'`{name}`' for name in changed)} "
            "(run with --allow-other-code: changes taken not to touch the bytes)")
    same = sum(row["draw"] == row["emulated"] for row in rows)
    machine = kernels.cpu()
    lines = [
        "# The draw's bytes on an emulated CPU of another type and vendor",
        "",
        f"Written by `{command}` (`benchmarks/emulated_cpu.py`) on {datetime.date.today().isoformat()}, code at "
        f"revision {here['revision'][:7]}{' (with uncommitted edits)' if here['dirty'] else ''}; the draw's jobs "
        f"ran at {', '.join(draw_revisions)} and the emulated ones at {', '.join(emulated_revisions)} (each job's own "
        f"record; a finished job is reused across calls), {code}. Host: {machine['model_name']} "
        f"({machine['vendor']}), Python {platform.python_version()}. Emulated: QEMU user mode, `-cpu {cpu}` "
        f"({CPU_MODELS.get(cpu, 'as QEMU defines it')}), every job under the kernel pin, one thread; each emulated "
        "job's record says which kernels it ran (the last column). QEMU gives every IEEE operation the bits any CPU "
        "gives, and the approximate reciprocal instructions (rcpps, rsqrtps, whose tables differ between Intel and "
        "AMD) full float32 precision, as no CPU does: a byte that depends on the vendor's dispatch or on those "
        "tables differs here. The emulated jobs' `machine.json` names the host's CPU (QEMU's user mode passes the "
        "host's `/proc/cpuinfo` through); the libraries see the emulated one.",
        "",
        f"**{same} of {len(rows)} files byte-identical** to the draw's"
        + (": the pinned jobs wrote the same bytes on the emulated CPU." if same == len(rows) else
           ": the pin does not cover everything these jobs compute (the rows marked below)."),
        "",
        "| job | file | same bytes | draw (SHA-256) | emulated (SHA-256) | emulated job's wall time (s) "
        "| emulator | kernels run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        equal = "yes" if row["draw"] == row["emulated"] else "**no**"
        lines.append(f"| {row['job']} | {row['file']} | {equal} | `{row['draw'][:16]}` | `{row['emulated'][:16]}` | "
                     f"{row['seconds']:.0f} | {_short_version(row.get('emulator', 'unknown'))} | {row['ran']} |")
    lines += ["", "A run reruns from the draw's own warm start, so its rows test the trainer alone; the warm start's "
              "rows test the supervised training. Metrics are compared as a hash of every column but the wall time "
              "(values, names and dtypes). An evaluation reruns the held-out evaluation of the draw's own checkpoints "
              "(every evaluated step, the sampler and the scorers; BFCL's scorer runs natively in its own "
              "environment, as a separate program the emulator does not follow), compared as each file's JSON but "
              "its provenance (code revision, machine, checkpoint path). The analysis reruns every analysis script "
              "of the workflow (the `python analysis/*.py` commands a forced dry run of it prints; not the "
              "diagnostics of `dara diagnose`) on the draw's runs and evaluations and "
              "compares each table and figure data file it writes (CSV and Markdown; the PNGs are not compared), "
              "and REPORT.md but its code-revision line.",
              "",
              "A job reused from an earlier call keeps the emulator that ran it (its row). QEMU 7.2 (Debian 12's) "
              "mis-executes numpy's AVX2 sort of 64-bit integers, which pandas' grouping calls (a wrong order, or a "
              "crash), so the check refuses it for new jobs; a job it ran counts where its bytes equal the draw's "
              "(whatever it mis-executed changed nothing there)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global EMULATOR
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="tiny", help="the draw's scale (default tiny)")
    parser.add_argument("--results", default="results/tiny", help="the draw's results folder (default: %(default)s)")
    parser.add_argument("--warm-start", nargs="*", default=list(DEFAULT_WARM_STARTS), metavar="TASK/K",
                        help="warm starts to rerun (default: %(default)s)")
    parser.add_argument("--run-dir", nargs="*", default=None,
                        help=f"run folders to rerun (default: {', '.join(DEFAULT_RUNS)} under --results)")
    parser.add_argument("--evaluate-run-dir", nargs="*", default=None,
                        help="run folders whose held-out evaluation to rerun on the draw's checkpoints (default: the "
                             "runs above)")
    parser.add_argument("--no-analysis", action="store_true",
                        help="skip the rerun of the workflow's analysis jobs (tables, figure data, REPORT.md)")
    parser.add_argument("--cpu", default=DEFAULT_CPU, help="QEMU's CPU model (default: %(default)s)")
    parser.add_argument("--emulator", default=EMULATOR,
                        help="QEMU's x86-64 user-mode emulator, 8 or later (default: %(default)s on PATH)")
    parser.add_argument("--work", default=None, help="folder for the emulated jobs (default: a fresh one in /tmp)")
    parser.add_argument("--out", default=None, help="the Markdown page (default: print it)")
    parser.add_argument("--allow-other-code", action="store_true",
                        help="check a draw whose src/ differs from this checkout's (the page lists the files)")
    args = parser.parse_args(argv)
    EMULATOR = args.emulator  # every emulated job of this call runs under it (a module setting: tests replace it)
    if shutil.which(EMULATOR) is None:
        parser.error(f"{EMULATOR} is missing: install Debian's qemu-user (apt-get install qemu-user; needs root; "
                     "QEMU 8 or later, on Debian 12 from bookworm-backports)")
    for spec in args.warm_start:
        if not spec.partition("/")[2].isdigit():
            parser.error(f"--warm-start takes TASK/K (e.g. toolcall/0), got {spec!r}")
    run_dirs = args.run_dir if args.run_dir is not None else [f"{args.results}/{run}" for run in DEFAULT_RUNS]
    evaluated = args.evaluate_run_dir if args.evaluate_run_dir is not None else run_dirs
    if not args.warm_start and not run_dirs and not evaluated and args.no_analysis:
        parser.error("nothing to check: name a warm start, a run or an evaluation, or keep the analysis")
    experiment = load_experiment(args.experiment)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="emulated_cpu_"))
    work.mkdir(parents=True, exist_ok=True)
    check_emulator(args.cpu, work)
    rows: list[dict] = []
    for spec in args.warm_start:
        task, _, index = spec.partition("/")
        rows += check_warm_start(args.experiment, Path(args.results), task, int(index), work, args.cpu,
                                 args.allow_other_code)
    for run_dir in run_dirs:
        rows += check_run(experiment, run_dir, work, args.cpu, args.allow_other_code)
    for run_dir in evaluated:
        rows += check_evaluation(experiment, run_dir, work, args.cpu, args.allow_other_code)
    if not args.no_analysis:
        rows += check_analysis(args.experiment, Path(args.results), work, args.cpu, args.allow_other_code)
    command = "python -m benchmarks.emulated_cpu " + " ".join(argv if argv is not None else sys.argv[1:])
    page = render(rows, args.cpu, command.strip())
    if args.out:
        write_text_atomic(args.out, page)
    else:
        print(page, end="")
    return 0 if all(row["draw"] == row["emulated"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
