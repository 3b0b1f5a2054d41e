# Analysis: one rule per paper artifact, named like it (`snakemake table1`, `snakemake fig3`, ...), each calling
# the script of the same name under analysis/ with exactly the runs and evaluations it draws from, plus the
# tiny-pipeline summaries (first_crossing, dynamics), two studies beyond the paper (survival, toy) and REPORT.md.
# Scripts read analysis/config.yaml (thresholds, metric names per scale) and write under results/{scale}/.
# `snakemake --report report.html` collects the figures with the captions in analysis/report/.

report: "../../analysis/report/workflow.rst"

TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
ANALYSIS_CONFIG = "analysis/config.yaml"
CAPTIONS = "../../analysis/report"  # report() captions are relative to this file


def analysis_metrics(*targets):
    """metrics.parquet of the runs of the named experiment targets that exist at this scale."""
    return sorted({path for target in targets if target in EXPERIMENT["targets"] for path in target_metrics(target)})


def analysis_evals(*targets):
    """Every checkpoint evaluation of the named targets' runs that exist at this scale."""
    return sorted({path for target in targets if target in EXPERIMENT["targets"] for path in eval_files(target)})


def figure(name, category):
    """PNG (in the Snakemake report, with analysis/report/<name>.rst as caption) and PDF of one figure."""
    return [report(f"{FIGURES}/{name}.png", caption=f"{CAPTIONS}/{name}.rst", category=category),
            f"{FIGURES}/{name}.pdf"]


ANALYSIS_TASKS = sorted({run["task"] for run in target_runs()})
ANALYSIS_COMMAND = (
    "python analysis/{rule}.py --scale " + SCALE + " --config " + ANALYSIS_CONFIG + " --out-dir " + RESULTS
    + " --metrics {input.metrics} --evals {input.evals} > {log} 2>&1"
)

# artifact -> (metrics of these targets, evaluations of these targets, outputs)
ARTIFACTS = {
    "first_crossing": (list(EXPERIMENT["targets"]), [],
                       [f"{TABLES}/first_crossing.csv", f"{TABLES}/first_crossing.md"]),
    "dynamics": (list(EXPERIMENT["targets"]), [],
                 [path for task in ANALYSIS_TASKS for path in figure(f"dynamics_{task}", "Training dynamics")]),
    "table1": ([], ["toolcall"], [f"{TABLES}/table1.csv", f"{TABLES}/table1.md"]),
    "table2": ([], ["three_rewards", "toolcall"], [f"{TABLES}/table2.csv", f"{TABLES}/table2.md"]),
    "table4a": ([], ["static_vs_dynamic"], [f"{TABLES}/table4a.csv", f"{TABLES}/table4a.md"]),
    "table4b": ([], [], [f"{TABLES}/table4b.md"]),
    "fig1b": (["toolcall", "act_critic"], [], [*figure("fig1b", "Paper figures"), f"{FIGURES}/fig1b.csv"]),
    "fig2": ([], ["toolcall"], [*figure("fig2", "Paper figures"), f"{FIGURES}/fig2.csv"]),
    "fig3": (["group_size"], [], [*figure("fig3", "Paper figures"), f"{FIGURES}/fig3.csv"]),
    "fig4": (["math_length"], [], [*figure("fig4", "Paper figures"), f"{FIGURES}/fig4.csv"]),
    "fig5": (["math_length"], [], [*figure("fig5", "Paper figures"), f"{FIGURES}/fig5.csv"]),
    "fig6": ([], ["math_length"], [*figure("fig6", "Paper figures"), f"{FIGURES}/fig6.csv"]),
    "survival": (["toolcall"], [], [*figure("survival", "Beyond the paper"), f"{TABLES}/survival.csv"]),
}

for _artifact, (_metric_targets, _eval_targets, _outputs) in ARTIFACTS.items():

    rule:
        name:
            _artifact
        input:
            script=f"analysis/{_artifact}.py",
            config=ANALYSIS_CONFIG,
            metrics=analysis_metrics(*_metric_targets),
            evals=analysis_evals(*_eval_targets),
        output:
            _outputs,
        log:
            f"{RESULTS}/logs/analysis/{_artifact}.log",
        benchmark:
            f"{RESULTS}/benchmarks/analysis/{_artifact}.tsv"
        threads: 1
        shell:
            ANALYSIS_COMMAND


rule toy:
    input:
        script="analysis/toy.py",
    output:
        figure("toy", "Beyond the paper"),
        f"{TABLES}/toy.csv",
    log:
        f"{RESULTS}/logs/analysis/toy.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/toy.tsv"
    threads: 1
    params:
        scale=SCALE,
        out=RESULTS,
    shell:
        "OMP_NUM_THREADS={threads} python {input.script} --scale {params.scale} --out-dir {params.out} > {log} 2>&1"


rule report_md:
    input:
        script="analysis/report.py",
        config=ANALYSIS_CONFIG,
        tables=[f"{TABLES}/{name}.csv" for name in ("first_crossing", "table1", "table2", "table4a", "survival", "toy")],
        stable=f"{FIGURES}/fig5.csv",
        metrics=analysis_metrics("toolcall"),
        evals=[],
    output:
        report(f"{RESULTS}/REPORT.md", caption=f"{CAPTIONS}/report_md.rst", category="Report"),
    log:
        f"{RESULTS}/logs/analysis/report_md.log",
    benchmark:
        f"{RESULTS}/benchmarks/analysis/report_md.tsv"
    threads: 1
    shell:
        "python {input.script} --scale " + SCALE + " --config {input.config} --out-dir " + RESULTS
        + " --metrics {input.metrics} > {log} 2>&1"


ALL_OUTPUTS += [path for _, _, outputs in ARTIFACTS.values() for path in outputs]
ALL_OUTPUTS += rules.toy.output + rules.report_md.output
