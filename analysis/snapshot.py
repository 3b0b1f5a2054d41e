"""Snapshot of a finished tiny run into docs/results/, and the generated blocks of the README and docs/ from it.

    python analysis/snapshot.py            # after `make reproduce`: results/tiny -> docs/results/, every page's blocks
                                           # (and results/verl_cpu -> docs/results/verl_cpu_*, after make verl-cpu)
    python analysis/snapshot.py --check    # every page's blocks equal the snapshot (tests/test_readme_numbers.py)
    python analysis/snapshot.py --compare REV --out PAGE
                                           # after `make reproduce`: the files a snapshot of results/tiny would
                                           # write, against docs/results/ as committed at git revision REV

README and docs quote no result by hand: they show blocks between ``<!-- snapshot:NAME -->`` and
``<!-- /snapshot:NAME -->`` that this script copies from ``docs/results/NAME.md``, and point at
``docs/results/REPORT.md`` for the rest. The snapshot records the code revision its runs were made with. A NAME with a
folder (``second_machine/claims``) shows a file of a record kept beside the snapshot, such as a run on another CPU
(docs/results/second_machine/), which this script never rewrites.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from dara.io import replace_atomically, write_text_atomic
from dara.provenance import code_label, read_revision_record, without_report_revision

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("survival", "fig3", "dynamics_toolcall", "dynamics_math_length", "fig5")
BLOCK = re.compile(r"(<!-- snapshot:(?P<name>[a-z0-9_]+(?:/[a-z0-9_]+)*) -->\n)(?P<body>.*?)"
                   r"(<!-- /snapshot:(?P=name) -->)", re.S)


def step0_table(policies: Path) -> str:
    """Step-0 rates of each warm-started policy (policies/<task>/warm_start<k>/warmstart.json): mean reward and
    density per reward, one column per warm start, and their median (the calibration's criteria hold for the median
    warm start)."""
    reports: dict[str, dict[int, dict]] = {}
    for report in policies.glob("*/warm_start*/warmstart.json"):
        index = int(report.parent.name.removeprefix("warm_start"))
        reports.setdefault(report.parent.parent.name, {})[index] = json.loads(report.read_text())["step0"]
    if not reports:
        raise FileNotFoundError(f"no warm start under {policies} (policies/<task>/warm_start<k>/warmstart.json)")
    lines = ["| task | reward | warm starts | mean at step 0: median (each warm start) | density at step 0: median "
             "(each) |", "|---|---|---|---|---|"]
    for task in sorted(reports):
        by_start = [reports[task][k] for k in sorted(reports[task])]
        rewards = [key.split("/", 1)[1] for key in by_start[0] if key.startswith("reward/")]
        for reward in rewards:
            means = [step0[f"reward/{reward}"] for step0 in by_start]
            densities = [step0.get(f"density/{reward}") for step0 in by_start]
            mean_text = f"{np.median(means):.3f} ({' '.join(f'{m:.3f}' for m in means)})"
            density_text = ("" if any(d is None for d in densities)
                            else f"{np.median(densities):.2f} ({' '.join(f'{d:.2f}' for d in densities)})")
            lines.append(f"| `{task}` | {reward} | {len(by_start)} | {mean_text} | {density_text} |")
    return "\n".join(lines) + "\n"


def headline_table(tables: Path, config: dict) -> str:
    """The headline from first_crossing.csv: per method and G, the first step the tool task's format reward reaches
    its threshold (``tasks.tool``, ``format_reward``, ``format_threshold`` in analysis/config.yaml), summarised by
    ``dara.analysis.crossing.crossing_summary`` exactly as first_crossing.md and the claims are (the Kaplan-Meier
    median and quartiles, never-crossing seeds censored at their last step), and the claims about it from claims.csv
    (effect size with its bootstrap interval, raw and Holm-adjusted p, verdict)."""
    import numpy as np
    import pandas as pd

    from dara.analysis import palette
    from dara.analysis.crossing import crossing_summary, step_text

    task, reward, threshold = config["tasks"]["tool"], config["format_reward"], float(config["format_threshold"])
    runs = pd.read_csv(tables / "first_crossing.csv")
    runs = runs[(runs["task"] == task) & (runs["reward"] == reward) & np.isclose(runs["threshold"], threshold)]
    summary = crossing_summary(runs, by=("method", "G"))
    lines = [f"| method | G | seeds | reached {threshold:g} | median steps to cross, Kaplan-Meier (q25-q75) |",
             "|---|---|---|---|---|"]
    for method in palette.ordered(summary["method"].unique()):
        for row in summary[summary["method"] == method].sort_values("G").itertuples():
            lines.append(f"| {palette.label(method)} | {row.G} | {row.n_runs} | {row.n_crossed} | "
                         f"{step_text(row.km_median)} ({step_text(row.km_q25)}-{step_text(row.km_q75)}) |")
    claims = pd.read_csv(tables / "claims.csv")
    claims = claims[claims["claim"].str.contains(f"{reward} {threshold:g} on {task}", regex=False)]
    lines += ["", "| claim | ours | median difference in steps [95 % CI] | p (raw) | p (Holm) | verdict |",
              "|---|---|---|---|---|---|"]
    for claim in claims.itertuples():
        difference = ("" if pd.isna(claim.median_difference) else
                      f"{claim.median_difference:g} [{claim.ci_low:g}, {claim.ci_high:g}]")
        p_raw, p_holm = ("" if pd.isna(p) else f"{p:.3g}" for p in (claim.p_raw, claim.p_holm))
        lines.append(f"| {claim.claim} | {claim.ours} | {difference} | {p_raw} | {p_holm} | {claim.verdict} |")
    return "\n".join(lines) + "\n"


def claims_table(tables: Path) -> str:
    """Every claim REPORT.md checks, with our numbers, the raw and Holm-adjusted p and the verdict (claims.csv)."""
    import pandas as pd

    claims = pd.read_csv(tables / "claims.csv")
    lines = ["| claim | ours | p (raw) | p (Holm) | verdict |", "|---|---|---|---|---|"]
    for claim in claims.itertuples():
        p_raw, p_holm = ("" if pd.isna(p) else f"{p:.3g}" for p in (claim.p_raw, claim.p_holm))
        lines.append(f"| {claim.claim} | {claim.ours} | {p_raw} | {p_holm} | {claim.verdict} |")
    return "\n".join(lines) + "\n"


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def timing_table(results: Path) -> str:
    """The wall time `make reproduce` recorded (results/tiny/reproduce_seconds.txt), what it covered, and every
    job's time summed per stage (core time: on two cores the wall time is at least half of it)."""
    recorded = (results / "reproduce_seconds.txt").read_text()
    seconds = float(recorded.split()[0])
    from_empty = recorded.strip().endswith("yes")
    # with pandas: only where a snapshot is taken, not for --check
    from dara.analysis.ledger import draw_benchmarks, job_seconds_by_stage

    runs = len(list((results / "runs").glob("*/*/G*/seed*/metrics.parquet")))
    benchmarks = draw_benchmarks(results)
    stages = job_seconds_by_stage(benchmarks)
    by_stage = ", ".join(f"{stage} {seconds / 60:.1f}" for stage, seconds in
                         sorted(stages.items(), key=lambda item: -item[1]))
    table = (f"| what | value |\n|---|---|\n| `make reproduce` wall time after set-up, 2 cores | "
             f"{minutes(seconds)} |\n| started from an empty `results/tiny` | "
             f"{'yes' if from_empty else 'no (a partial rerun)'} |\n| training runs | {runs} |\n"
             f"| every job's time, summed | {minutes(sum(stages.values()))} |\n"
             f"| per stage ({benchmarks.name}/ folder), minutes | {by_stage} |\n")
    opt_in_stages = job_seconds_by_stage(benchmarks / "opt_in")
    if opt_in_stages:
        table += (f"| opt-in targets' jobs (run by target name, not by `make reproduce`), summed | "
                  f"{minutes(sum(opt_in_stages.values()))} |\n")
    return table


def copy(source: Path, target: Path) -> None:
    """Copy a file into place atomically (a killed snapshot never leaves a half-written file)."""
    replace_atomically(target, lambda temporary: shutil.copyfile(source, temporary))


def verl_cpu_timing_table(results: Path) -> str:
    """What `make verl-cpu` recorded: wall time (results/verl_cpu/run_seconds.txt), runs per backend, and the peak
    memory of a verl training job (Snakemake's benchmark max_rss, the job's process tree: trainer, Ray workers)."""
    import pandas as pd

    recorded = (results / "run_seconds.txt").read_text()
    seconds = float(recorded.split()[0])
    from_empty = recorded.strip().endswith("yes")
    # verl's runs sit under runs/<task>-<model>/ (runs/<task>/ holds their views for the analysis), the tiny
    # trainer's under tiny/runs/
    verl_runs = len(list((results / "runs").glob("*-*/*/G*/seed*/metrics.parquet")))
    tiny_runs = len(list((results / "tiny" / "runs").glob("*/*/G*/seed*/metrics.parquet")))
    records = [read_revision_record(path.parent) for path in results.glob("**/runs/*/*/G*/seed*/git_revision.txt")]
    revisions = sorted({code_label(record["revision"], record["dirty"], width=10) for record in records})
    # verl jobs are one run each (<job>_seed<S>.tsv); the tiny trainer's are seed groups (<task>_<method>_G<G>.tsv)
    verl_jobs = [pd.read_csv(path, sep="\t") for path in sorted((results / "benchmarks" / "train").glob("*_seed*.tsv"))]
    if not verl_jobs:
        raise SystemExit(f"no verl training benchmarks under {results}/benchmarks/train: run make verl-cpu")
    peak = max(float(frame["max_rss"].max()) for frame in verl_jobs)
    per_run = [float(frame["s"].iloc[-1]) for frame in verl_jobs]
    from dara.analysis.ledger import job_seconds_by_stage

    # every job's own time: what a run from empty costs, also after a partial rerun (verl jobs run one at a time)
    job_seconds = sum(job_seconds_by_stage(results / "benchmarks").values())
    return (f"| what | value |\n|---|---|\n| `make verl-cpu` wall time after set-up, 2 cores | "
            f"{minutes(seconds)} |\n| started from an empty `results/verl_cpu` | "
            f"{'yes' if from_empty else 'no (a partial rerun)'} |\n| every job's time, summed | "
            f"{minutes(job_seconds)} |\n| verl runs / tiny-trainer runs | "
            f"{verl_runs} / {tiny_runs} |\n| one verl run (Ray start-up included), min-max | "
            f"{min(per_run):.0f}-{max(per_run):.0f} s |\n| peak memory of a verl training job (max RSS) | "
            f"{peak / 1024:.1f} GB |\n| code revision of the runs | {', '.join(revisions)} |\n")


def take_verl_cpu_snapshot(results: Path, out: Path) -> None:
    """The verl_cpu scale's side-by-side table, figure and cost, when `make verl-cpu` has run."""
    copy(results / "tables" / "backends.md", out / "verl_cpu_backends.md")
    copy(results / "figures" / "backends.png", out / "verl_cpu_backends.png")
    write_text_atomic(out / "verl_cpu_timing.md", verl_cpu_timing_table(results))


def run_revisions(runs: Path) -> set[str]:
    """The distinct ``git_revision.txt`` texts of the runs under a runs folder (``<task>/<method>/G<G>/seed<S>``)."""
    return {path.read_text() for path in runs.glob("*/*/G*/seed*/git_revision.txt")}


def other_backend_revisions(results: Path) -> str:
    """REVISION's lines for the runs another backend trained beside the scale's own (``<results>/<backend>/runs/``:
    the trl target's, whose comparison the snapshot takes): each backend's distinct code revisions, once each."""
    text = ""
    for runs in sorted(results.glob("*/runs")):
        revisions = sorted(run_revisions(runs))
        if revisions:
            text += f"# {runs.parent.name} runs (backends.md)\n" + "".join(revisions)
    return text


def machine_table(results: Path) -> str:
    """Where the snapshot's runs and warm starts computed: the CPU and the kernel dispatch of each run's machine.json
    and each warm start's warmstart.json (`dara.kernels.machine_record`). Every one must have run pinned, on one CPU
    type, under one dispatch: a tree that mixes them is two draws, refused like mixed code revisions."""
    records = [json.loads(path.read_text()) for path in sorted((results / "runs").glob("*/*/G*/seed*/machine.json"))]
    runs = len(list((results / "runs").glob("*/*/G*/seed*/metrics.parquet")))
    if len(records) != runs:
        raise SystemExit(f"{runs - len(records)} of the {runs} runs under {results} have no machine.json: they ran "
                         "before the kernel pin; rerun them")
    for path in sorted((results / "policies").glob("*/warm_start*/warmstart.json")):
        record = json.loads(path.read_text()).get("machine")
        if record is None:
            raise SystemExit(f"{path} has no machine record: that warm start ran before the kernel pin; rerun it")
        records.append(record)
    dispatches = {json.dumps({key: value for key, value in record["dispatch"].items() if key != "torch_threads"},
                             sort_keys=True) for record in records}
    cpus = {json.dumps(record["cpu"], sort_keys=True) for record in records}
    if not all(record["dispatch"].get("pinned") for record in records) or len(dispatches) != 1 or len(cpus) != 1:
        raise SystemExit(f"the runs and warm starts under {results} ran under {len(dispatches)} kernel dispatches on "
                         f"{len(cpus)} CPU types, not all pinned: rerun them on one machine under the pin")
    dispatch, cpu = records[0]["dispatch"], records[0]["cpu"]
    flags = ", ".join(flag for flag, present in cpu["flags"].items() if present)
    variables = ", ".join(f"`{name}={value}`" for name, value in dispatch["variables"].items())
    return ("| what | value |\n|---|---|\n"
            f"| CPU | {cpu['vendor']} {cpu['model_name']} (family {cpu['family']}, model {cpu['model']}), "
            f"{cpu['logical_cpus']} logical CPUs |\n| vector instructions | {flags} |\n"
            f"| kernel pin | {variables} |\n"
            f"| dispatch seen by every job | ATen {dispatch['aten_cpu_capability']}, MKL branch "
            f"{dispatch['mkl_cbwr_branch']}, OpenBLAS {dispatch.get('openblas_core') or '(not recorded)'} kernels, "
            f"numpy's loops {', '.join(dispatch.get('numpy_simd') or ['(not recorded)'])} |\n"
            f"| torch, MKL, oneDNN | {dispatch['torch']}, {dispatch['mkl']}, "
            f"{dispatch['onednn']} |\n| runs and warm starts recorded | {len(records)} |\n")


def record_in_ledger(results: Path, out: Path) -> None:
    """The finished draw joins the ledger of reproductions (``<out>/ledger.csv``; analysis/ledger.py refuses a
    partial, dirty or mixed draw, and leaves one already recorded as it is), and the ledger's views are redrawn."""
    ledger = out / "ledger.csv"
    for command in (["append", "--results", str(results), "--skip-recorded", "--ledger", str(ledger)],
                    ["views", "--ledger", str(ledger), "--out", str(out)]):
        done = subprocess.run([sys.executable, str(ROOT / "analysis" / "ledger.py"), *command], text=True,
                              capture_output=True)
        if done.returncode != 0:
            raise SystemExit(f"analysis/ledger.py {command[0]}: {done.stderr.strip() or done.stdout.strip()}")
        print(done.stdout.strip())


def take_snapshot(results: Path, out: Path) -> None:
    from dara.provenance import revision_text

    analysis_revision = revision_text()  # before this function edits tracked files (docs/results/)
    record_in_ledger(results, out)
    copy(results / "REPORT.md", out / "REPORT.md")
    copy(results / "tables" / "first_crossing.md", out / "first_crossing.md")
    from dara.analysis.config import load_analysis_config

    config = load_analysis_config(ROOT / "analysis" / "config.yaml", "tiny")
    write_text_atomic(out / "headline.md", headline_table(results / "tables", config))
    write_text_atomic(out / "step0.md", step0_table(results / "policies"))
    write_text_atomic(out / "claims.md", claims_table(results / "tables"))
    copy(results / "tables" / "regime.md", out / "regime.md")
    copy(results / "tables" / "criteria.md", out / "criteria.md")
    copy(results / "tables" / "denser_regime.md", out / "denser_regime.md")
    write_text_atomic(out / "timing.md", timing_table(results))
    write_text_atomic(out / "machine.md", machine_table(results))
    # make replicate's comparisons of each claim's verdict and of the regime criteria in two independent replicates,
    # when it ran; one kept from an earlier snapshot compares another draw's, so it says so at its top (once) and
    # names that draw
    for name in REPLICATE_TABLES:
        if (results / "tables" / name).is_file():
            copy(results / "tables" / name, out / name)
        elif (out / name).is_file():
            mark_earlier_draw(out / name, out / "REVISION")
    for name in FIGURES:
        copy(results / "figures" / f"{name}.png", out / f"{name}.png")
    # `dara diagnose` on the headline's GRPO run (docs/diagnose.md)
    copy(results / "diagnostics" / "toolcall" / "diagnostics.png", out / "diagnostics_toolcall.png")
    copy(results / "diagnostics" / "toolcall" / "report.md", out / "diagnostics_toolcall.md")
    # the opt-in `trl` target's comparison, when it ran (`snakemake --cores 2 trl`); an older one is kept otherwise
    backend_revisions = ""
    if (results / "tables" / "backends.md").is_file():
        copy(results / "tables" / "backends.md", out / "backends.md")
        copy(results / "figures" / "backends.png", out / "backends.png")
        backend_revisions = other_backend_revisions(results)
    elif (out / "backends.md").is_file():  # kept from an earlier snapshot: say so, since its runs are not these
        backend_revisions = ("# backends.md and backends.png: kept from an earlier snapshot (not retrained on these "
                             "runs; `git log docs/results/backends.md` finds it)\n")
    revisions = run_revisions(results / "runs")
    if len(revisions) != 1:
        raise SystemExit(f"the runs under {results} come from {len(revisions)} code revisions; rerun them together")
    # each held-out evaluation file names the code that sampled and scored it (an evaluation can be redone alone)
    evaluations = sorted({(record["code_revision"]["revision"], record["code_revision"]["dirty"])
                          for path in (results / "eval").glob("*/*/G*/seed*/step*.json")
                          for record in [json.loads(path.read_text())]})
    evaluation_text = "".join(f"revision: {sha}\ndirty: {str(dirty).lower()}\n" for sha, dirty in evaluations)
    # the runs' revision decides the metrics; tables, figures and REPORT.md are redrawn by the analysis of this one
    write_text_atomic(out / "REVISION", f"# training runs\n{revisions.pop()}{backend_revisions}"
                                        f"# held-out evaluations\n{evaluation_text}"
                                        f"# analysis and this snapshot\n{analysis_revision}")


def training_runs_revision(text: str) -> str | None:
    """The training runs' short revision in the text of a snapshot's REVISION file; None where it names none."""
    found = re.search(r"# training runs\nrevision: ([0-9a-f]{7})", text)
    return found.group(1) if found else None


EARLIER_DRAW = "**Not this draw's replicate:**"
# make replicate's tables (analysis/replicates.py): the claims' verdicts and the regime criteria in both replicates
REPLICATE_TABLES = ("replicates.md", "replicate_criteria.md")


def mark_earlier_draw(table: Path, revision_file: Path) -> None:
    """Put a line on top of a replicates table kept from an earlier snapshot: its study column is that snapshot's
    draw (the training runs' revision in the REVISION file it came with), not the draw beside it."""
    text = table.read_text()
    if EARLIER_DRAW in text:
        return
    runs = training_runs_revision(revision_file.read_text()) if revision_file.is_file() else None
    draw = f"the draw of training runs at {runs}" if runs else "an earlier draw"
    note = (f"{EARLIER_DRAW} this table compares {draw} with its replicate; `make replicate` has not run on the "
            "draw this snapshot shows, so its numbers may differ from the study column here.\n\n")
    title, rest = text.split("\n", 1) if text.startswith("# ") else ("", text)
    write_text_atomic(table, (f"{title}\n\n" if title else "") + note + rest.lstrip("\n"))


# What a snapshot says about the draw itself (its code, machine, time and the ledger of draws), not its results
DRAW_RECORDS = frozenset({"REVISION", "machine.md", "timing.md", "ledger.csv", "ledger_claims.md",
                          "ledger_effects.png"})


def committed_file(revision: str, path: str) -> bytes | None:
    """The bytes of ``path`` (relative to the repository) at git ``revision``; None where it has no such file."""
    shown = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True)
    return shown.stdout if shown.returncode == 0 else None


def compare_files(remade: Path, committed) -> list[dict]:
    """Each result file in the folder ``remade`` (a snapshot written there) against ``committed(name)``, the same
    file of the snapshot compared with (None where it has none): rows of file, both SHA-256 digests and whether
    they are equal. REPORT.md is compared without the code revision its first lines name; DRAW_RECORDS are left out."""
    def digest(data: bytes, name: str) -> str:
        if name == "REPORT.md":
            data = without_report_revision(data.decode()).encode()
        return hashlib.sha256(data).hexdigest()

    rows = []
    for path in sorted(remade.iterdir(), key=lambda path: path.name):
        if path.name in DRAW_RECORDS or not path.is_file():
            continue
        before = committed(path.name)
        snapshot = None if before is None else digest(before, path.name)
        remade_digest = digest(path.read_bytes(), path.name)
        rows.append({"file": path.name, "snapshot": snapshot, "remade": remade_digest,
                     "equal": snapshot == remade_digest})
    return rows


def _table_row(text: str, what: str) -> str:
    """The value of the row ``what`` of a two-column Markdown table (machine.md's), or "(not recorded)"."""
    found = re.search(rf"^\| {re.escape(what)} \| (.*) \|$", text, re.M)
    return found.group(1) if found else "(not recorded)"


def compare_page(results: Path, revision: str) -> str:
    """The Markdown page: a snapshot of ``results`` written to a temporary folder, each of its result files against
    docs/results/ as committed at ``revision``, with where and when both draws ran."""
    snapshot_revision = subprocess.run(["git", "rev-parse", "--short=7", revision], cwd=ROOT, capture_output=True,
                                       text=True, check=True).stdout.strip()
    committed = lambda name: committed_file(revision, f"docs/results/{name}")  # noqa: E731
    with tempfile.TemporaryDirectory() as temporary:
        remade = Path(temporary)
        (remade / "ledger.csv").write_bytes(committed("ledger.csv") or b"")  # the draw joins a copy of the ledger
        take_snapshot(results, remade)
        rows = compare_files(remade, committed)
        machine, timing = (remade / "machine.md").read_text(), (remade / "timing.md").read_text()
        runs_revision = training_runs_revision((remade / "REVISION").read_text())
    snapshot_machine = (committed("machine.md") or b"").decode()
    snapshot_runs = training_runs_revision((committed("REVISION") or b"").decode()) or "(not recorded)"
    equal = sum(row["equal"] for row in rows)
    lines = [
        f"# A snapshot of results/{results.name} against the one committed at {snapshot_revision}", "",
        f"Written by `python analysis/snapshot.py --compare {snapshot_revision} --out <this page>` after `make "
        f"reproduce`: the files `make snapshot` would copy from `results/{results.name}` (tables, figures, "
        f"REPORT.md), each against the snapshot in `docs/results/` as committed at {snapshot_revision}. REPORT.md is "
        "compared without the code revision its first lines name; the files that record the draw rather than its "
        "results (its revision, machine, time and the ledger) are not compared.", "",
        f"- **Remade**: training runs at revision {runs_revision}, on {_table_row(machine, 'CPU')} "
        f"({_table_row(machine, 'vector instructions')}); dispatch "
        f"{_table_row(machine, 'dispatch seen by every job')}.",
        f"- **Snapshot**: training runs at revision {snapshot_runs}, on {_table_row(snapshot_machine, 'CPU')} "
        f"({_table_row(snapshot_machine, 'vector instructions')}); dispatch "
        f"{_table_row(snapshot_machine, 'dispatch seen by every job')}.", "",
        f"**{equal} of {len(rows)} files byte-identical**" + ("." if equal == len(rows) else
                                                               f"; {len(rows) - equal} differ or are new."), "",
        "| file | snapshot (SHA-256) | remade (SHA-256) | equal |", "|---|---|---|---|",
        *(f"| {row['file']} | {row['snapshot'][:16] if row['snapshot'] else 'not in the snapshot'} | "
          f"{row['remade'][:16]} | {'yes' if row['equal'] else '**no**'} |" for row in rows), "",
        "## The remade draw's time", "", timing.split("\n", 1)[1].lstrip("\n") if timing.startswith("# ") else timing,
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def fill_blocks(text: str, snapshot: Path) -> str:
    def body(match: re.Match) -> str:
        source = snapshot / f"{match['name']}.md"
        if not source.is_file():
            raise SystemExit(f"block {match['name']!r} has no {source}")
        text = source.read_text()
        if text.startswith("# "):  # a file's own title would be a second page title inside the README
            text = text.split("\n", 1)[1].lstrip("\n")
        return match.group(1) + text + match.group(4)

    return BLOCK.sub(body, text)


def documents(readme: Path, docs: Path) -> list[Path]:
    """The README and every page under ``docs`` (markdown, the snapshot's own folder left out) that shows a block."""
    pages = sorted(path for path in docs.glob("*.md") if BLOCK.search(path.read_text())) if docs.is_dir() else []
    return [readme, *pages]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "tiny")
    parser.add_argument("--verl-cpu-results", type=Path, default=ROOT / "results" / "verl_cpu")
    parser.add_argument("--snapshot", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="pages whose blocks are filled too")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--check", action="store_true", help="only check that the pages' blocks are current")
    which.add_argument("--blocks", action="store_true", help="only fill the pages' blocks from the snapshot as it is "
                       "(after a benchmark rewrote its page there, as make bench-trainer does)")
    which.add_argument("--compare", metavar="REVISION", help="only compare: the files a snapshot of --results would "
                       "write, against docs/results/ as committed at this git revision, written to --out")
    parser.add_argument("--out", type=Path, help="with --compare: the page to write (else printed)")
    args = parser.parse_args(argv)
    if args.compare:
        if not (args.results / "REPORT.md").is_file():
            sys.exit(f"nothing to compare: no {args.results}/REPORT.md (make reproduce)")
        page = compare_page(args.results, args.compare)
        if args.out:
            write_text_atomic(args.out, page)
        else:
            print(page, end="")
        return
    pages = documents(args.readme, args.docs)
    if args.blocks:
        for page in pages:
            write_text_atomic(page, fill_blocks(page.read_text(), args.snapshot))
        return
    if args.check:
        stale = [str(page) for page in pages if fill_blocks(page.read_text(), args.snapshot) != page.read_text()]
        if stale:
            sys.exit(f"{', '.join(stale)}: generated blocks differ from {args.snapshot}; run python analysis/snapshot.py")
        return
    tiny_done = (args.results / "REPORT.md").is_file()
    verl_cpu_done = (args.verl_cpu_results / "run_seconds.txt").is_file()
    if not (tiny_done or verl_cpu_done):
        sys.exit(f"nothing to snapshot: no {args.results}/REPORT.md (make reproduce) and no "
                 f"{args.verl_cpu_results}/run_seconds.txt (make verl-cpu)")
    if tiny_done:  # each scale's part is taken only from a finished run of it; the other's files stay as they are
        take_snapshot(args.results, args.snapshot)
    else:
        print(f"no {args.results}/REPORT.md: the tiny scale's snapshot is left as it is", file=sys.stderr)
    if verl_cpu_done:
        take_verl_cpu_snapshot(args.verl_cpu_results, args.snapshot)
    for page in pages:
        write_text_atomic(page, fill_blocks(page.read_text(), args.snapshot))

if __name__ == "__main__":
    main()
