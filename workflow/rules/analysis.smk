# Analysis: one rule per paper artifact, named like it (`snakemake table1`, `snakemake fig3`, ...), each calling
# the script of the same name under analysis/ with exactly the runs and evaluations it draws from, plus the
# tiny-pipeline summaries (first_crossing, dynamics), two studies beyond the paper (survival, toy) and REPORT.md
# (target report_md, script analysis/report_md.py).
# Scripts read analysis/config.yaml (thresholds, metric names per scale) and write under results/{scale}/.
# `snakemake --report report.html` collects the figures with the captions in analysis/report/.

from pathlib import Path


report: "../../analysis/report/workflow.rst"

TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
from dara.analysis.config import load_analysis_config
from dara.experiments import is_paper_setting

ANALYSIS_CONFIG = "analysis/config.yaml"
# the experiment's analysis block (merged over the config by the scripts): a param, so that editing it reruns them
ANALYSIS_BLOCK = json.dumps(EXPERIMENT.get("analysis", {}), sort_keys=True)
# checked now, with the study-wide config and its schema, so a typo in the block fails before anything trains
load_analysis_config(ANALYSIS_CONFIG, EXPERIMENT_SOURCE)
CAPTIONS = "../../analysis/report"  # report() captions are relative to this file


# Per task (whatever targets ran it at this scale, with the scale's own backend): its runs' metrics and every
# checkpoint's evaluation. At paper scale metrics are the primary model's shared view (paper.smk) and evaluations
# cover every model of the task.
ANALYSIS_TASKS = sorted({run.task for run in OWN_RUNS})
TASK_METRICS = {task: sorted({run.shared_view_metrics for run in OWN_RUNS if run.task == task and run.primary})
                for task in ANALYSIS_TASKS}
# Evaluations are read at the task's main group size only, as the tables and checkpoint figures show: the
# group-size sweep is analysed from training metrics (fig3).
TASK_EVALS = {task: sorted({path for run in OWN_RUNS if run.task == task and run.group_size == main_group_size(task)
                            for path in run.eval_files}) for task in ANALYSIS_TASKS}
# The model a single-model artifact shows at paper scale (task=model,...); empty at the CPU scales.
PRIMARY_MODELS = ",".join(f"{task}={model}" for task, model in
                          EXPERIMENT["settings"].get("paper", {}).get("primary_models", {}).items())
# A figure is a PNG (in the Snakemake report, captioned by analysis/report/<name>.rst) and a PDF.
figure = lambda name, category: [report(f"{FIGURES}/{name}.png", caption=f"{CAPTIONS}/{name}.rst",
                                        category=category), f"{FIGURES}/{name}.pdf"]
# Every analysis output sits in results/{scale}/tables/ or results/{scale}/figures/: the scripts' --out-dir.
results_of = lambda wildcards, output: str(Path(output[0]).parents[1])

# artifact -> (metrics of these tasks, evaluations of these tasks, outputs)
ARTIFACTS = {
    "first_crossing": (ANALYSIS_TASKS, [],
                       [f"{TABLES}/first_crossing.csv", f"{TABLES}/first_crossing.md"]),
    "dynamics": (ANALYSIS_TASKS, [],
                 [path for task in ANALYSIS_TASKS for path in figure(f"dynamics_{task}", "Training dynamics")]),
    "table1": ([], ["toolcall"], [f"{TABLES}/table1.csv", f"{TABLES}/table1.md", f"{TABLES}/table1_runs.csv"]),
    "table2": ([], ["toolcall3", "toolcall"], [f"{TABLES}/table2.csv", f"{TABLES}/table2.md"]),
    "table4a": ([], ["math_length"], [f"{TABLES}/table4a.csv", f"{TABLES}/table4a.md", f"{TABLES}/table4a_runs.csv"]),
    "table4b": ([], [], [f"{TABLES}/table4b.md"]),
    "fig1b": (["toolcall", "act_critic"], [], [*figure("fig1b", "Paper figures"), f"{FIGURES}/fig1b.csv"]),
    "fig2": ([], ["toolcall"], [*figure("fig2", "Paper figures"), f"{FIGURES}/fig2.csv"]),
    "fig3": (["toolcall"], [], [*figure("fig3", "Paper figures"), f"{FIGURES}/fig3.csv"]),
    "fig4": (["math_length"], [], [*figure("fig4", "Paper figures"), f"{FIGURES}/fig4.csv"]),
    "fig5": (["math_length"], [], [*figure("fig5", "Paper figures"), f"{FIGURES}/fig5.csv"]),
    "fig6": ([], ["math_length"], [*figure("fig6", "Paper figures"), f"{FIGURES}/fig6.csv"]),
    "survival": (["toolcall"], [], [*figure("survival", "Beyond the paper"), f"{TABLES}/survival.csv"]),
    "regime": (ANALYSIS_TASKS, ANALYSIS_TASKS, [f"{TABLES}/regime.csv", f"{TABLES}/regime.md"]),
}

for _artifact, (_metric_tasks, _eval_tasks, _outputs) in ARTIFACTS.items():

    rule:
        name:
            _artifact
        input:
            script=f"analysis/{_artifact}.py",
            config=ANALYSIS_CONFIG,
            metrics=sorted({path for task in _metric_tasks for path in TASK_METRICS.get(task, [])}),
            evals=sorted({path for task in _eval_tasks for path in TASK_EVALS.get(task, [])}),
        output:
            _outputs,
        log:
            f"{RESULTS}/logs/analysis/{_artifact}.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/{_artifact}.tsv"
        threads: 1
        params:
            scale=EXPERIMENT_SOURCE,  # a scale name or an experiment file: its analysis block
            analysis=ANALYSIS_BLOCK,
            out=results_of,
            primary=PRIMARY_MODELS,
        shell:
            "python {input.script} --scale {params.scale:q} --config {input.config} --out-dir {params.out}"
            " --primary-models '{params.primary}' --metrics {input.metrics} --evals {input.evals} > {log} 2>&1"


rule toy:
    input:
        script="analysis/toy.py",
        config=ANALYSIS_CONFIG,
    output:
        figure("toy", "Beyond the paper"),
        f"{TABLES}/toy.csv",
    log:
        f"{RESULTS}/logs/analysis/toy.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/toy.tsv"
    threads: 1
    params:
        scale=EXPERIMENT_SOURCE,
        analysis=ANALYSIS_BLOCK,
        out=results_of,
    shell:
        "OMP_NUM_THREADS={threads} python {input.script} --scale {params.scale:q} --config {input.config}"
        " --out-dir {params.out} > {log} 2>&1"


rule report_md:
    input:
        script="analysis/report_md.py",
        config=ANALYSIS_CONFIG,
        # table1_runs / table4a_runs: each run's final scores, which the non-inferiority claims test
        tables=[f"{TABLES}/{name}.csv" for name in ("first_crossing", "table1", "table1_runs", "table2", "table4a",
                                                     "table4a_runs", "survival", "toy")],
        stable=f"{FIGURES}/fig5.csv",
        # the paper's numbers: a corrected reference row rebuilds REPORT.md
        reference=sorted(str(path) for path in Path("analysis/reference").glob("*.csv")),
        metrics=sorted({path for paths in TASK_METRICS.values() for path in paths}),
    output:
        report(f"{RESULTS}/REPORT.md", caption=f"{CAPTIONS}/report_md.rst", category="Report"),
        f"{TABLES}/claims.csv",
        f"{TABLES}/denser_regime.md",
        f"{TABLES}/denser_regime.csv",
    log:
        f"{RESULTS}/logs/analysis/report_md.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/report_md.tsv"
    threads: 1
    params:
        scale=EXPERIMENT_SOURCE,
        analysis=ANALYSIS_BLOCK,
        out=subpath(output[0], parent=True),
        primary=PRIMARY_MODELS,
    shell:
        "python {input.script} --scale {params.scale:q} --config {input.config} --out-dir {params.out}"
        " --primary-models '{params.primary}' --metrics {input.metrics} > {log} 2>&1"


ALL_OUTPUTS += [path for _, _, outputs in ARTIFACTS.values() for path in outputs]
ALL_OUTPUTS += rules.toy.output + rules.report_md.output

# The tiny calibration's regime criteria (analysis/config.yaml's regime_criteria) read on this draw's tables, at
# every scale but the paper's setting (whose runs are not held to the tiny calibration's bounds); a task a scale
# does not run reads "not read".
if not is_paper_setting(EXPERIMENT):

    rule criteria:
        input:
            script="analysis/criteria.py",
            config=ANALYSIS_CONFIG,
            regime=f"{TABLES}/regime.csv",
            first_crossing=f"{TABLES}/first_crossing.csv",
            stable=f"{FIGURES}/fig5.csv",
        output:
            f"{TABLES}/criteria.csv",
            f"{TABLES}/criteria.md",
        log:
            f"{RESULTS}/logs/analysis/criteria.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/criteria.tsv"
        threads: 1
        params:
            scale=EXPERIMENT_SOURCE,
            analysis=ANALYSIS_BLOCK,
            out=results_of,
        shell:
            "python {input.script} --scale {params.scale:q} --config {input.config} --regime {input.regime}"
            " --first-crossing {input.first_crossing} --stable {input.stable} --out-dir {params.out} > {log} 2>&1"

    ALL_OUTPUTS += rules.criteria.output

# `dara diagnose` on one GRPO run of the headline task (its rollouts.parquet, an output of the tiny trainer's
# jobs): what the README's "Is my multi-reward run imbalanced?" shows. The CPU trainer's scales only (a
# verl run dumps its rollouts only with trainer.rollout_data_dir).
DIAGNOSED = sorted((run for run in OWN_RUNS if run.backend == "tiny" and run.task == "toolcall"
                    and run.method == "grpo" and run.group_size == main_group_size("toolcall")),
                   key=lambda run: run.seed)[:1]
if DIAGNOSED:

    rule diagnostics:
        input:
            rollouts=f"{DIAGNOSED[0].run_dir}/rollouts.parquet",
        output:
            f"{RESULTS}/diagnostics/toolcall/diagnostics.csv",
            f"{RESULTS}/diagnostics/toolcall/report.md",
            report(f"{RESULTS}/diagnostics/toolcall/diagnostics.png", caption=f"{CAPTIONS}/diagnostics.rst",
                   category="Beyond the paper"),
        log:
            f"{RESULTS}/logs/analysis/diagnostics.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/diagnostics.tsv"
        threads: 1
        params:
            out=subpath(output[0], parent=True),
        shell:
            "OMP_NUM_THREADS={threads} python -m dara diagnose {input.rollouts} --group group --step step"
            " --reward format --reward correctness --out {params.out} > {log} 2>&1"

    ALL_OUTPUTS += rules.diagnostics.output



# Backends side by side (analysis/backends.py): where a target trains runs with another backend than the scale's
# own (TRL at the CPU scales, the tiny trainer at verl_cpu), the same task, method, G and seed of both, compared.
OTHER_BACKEND_RUNS = [run for run in RUNS if run.backend != EXPERIMENT["backend"]]
if OTHER_BACKEND_RUNS:
    _keys = {(run.task, run.method, run.group_size, run.seed) for run in OTHER_BACKEND_RUNS}
    BACKEND_PAIRS = sorted({run.shared_view_metrics for run in OWN_RUNS if run.primary
                            and (run.task, run.method, run.group_size, run.seed) in _keys}
                           | {run.metrics for run in OTHER_BACKEND_RUNS})

    rule backends:
        input:
            script="analysis/backends.py",
            config=ANALYSIS_CONFIG,
            metrics=BACKEND_PAIRS,
        output:
            f"{TABLES}/backends.csv",
            f"{TABLES}/backends.md",
            figure("backends", "Backends"),
        log:
            f"{RESULTS}/logs/analysis/backends.log",
        threads: 1
        params:
            scale=EXPERIMENT_SOURCE,  # a scale name or an experiment file: its analysis block
            analysis=ANALYSIS_BLOCK,
            own=EXPERIMENT["backend"],
            out=results_of,
        shell:
            "python {input.script} --scale {params.scale:q} --config {input.config} --own-backend {params.own}"
            " --out-dir {params.out} --metrics {input.metrics} > {log} 2>&1"

    # An opt-in target (targets.<name>.opt_in) is left out of `rule all`; the others bring the comparison along.
    if not all(map(opt_in, OTHER_BACKEND_RUNS)):
        ALL_OUTPUTS += rules.backends.output
