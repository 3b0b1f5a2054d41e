# Paper scale on verl (GPU cluster): `snakemake --config scale=paper --profile profiles/slurm`.
# Planned only at scale=paper, where the tiny rules are not (train.smk trains only the tiny backend). One GPU job
# per run: dara.verl_plugin.launch resolves the run from experiments/paper.yaml, runs verl (Ray across the job's
# nodes, profiles/slurm/ray_job.sh) and writes the run's metrics.parquet from verl's file-logger JSONL.
# GPU resources (gpu, gpu_model, nodes, runtime) come from the run's model in experiments/paper.yaml, because
# verl's n_gpus_per_node/nnodes are part of the study's set-up; partitions and accounts come from the profile.

if SCALE == "paper":
    # Rule-level wildcard constraints: evaluate.smk's paper rules name the model-qualified folder {task}.
    RUN_WILDCARDS = dict(method="[a-z0-9_]+", group_size=r"\d+", seed=r"\d+")

    rule prepare_paper_data:
        wildcard_constraints:
            dataset="rlla_4k|deepscaler",
        output:
            train=f"{PAPER_DATA}/{{dataset}}/train.parquet",
            test=f"{PAPER_DATA}/{{dataset}}/test.parquet",
        log:
            f"{RESULTS}/logs/prepare_paper_data/{{dataset}}.log",
        params:
            out=subpath(output.train, parent=True),
        shell:
            "python -m dara.verl_plugin.data --dataset {wildcards.dataset} --out {params.out} > {log} 2>&1"

    rule train_paper:
        wildcard_constraints:
            run_task="[a-z0-9_]+-[a-z0-9_.-]+",
            **RUN_WILDCARDS,
        input:
            paper_run_data,
        output:
            f"{RESULTS}/runs/{{run_task}}/{{method}}/G{{group_size}}/seed{{seed}}/metrics.parquet",
        log:
            f"{RESULTS}/logs/train/{{run_task}}/{{method}}/G{{group_size}}/seed{{seed}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/train/{{run_task}}/{{method}}/G{{group_size}}/seed{{seed}}.tsv"
        resources:
            gpu=paper_gpus,
            gpu_model=paper_resource("gpu_model"),
            nodes=paper_resource("nodes"),
            gpus_per_node=paper_resource("gpus_per_node"),
            runtime=paper_resource("runtime_minutes"),
        params:
            results=subpath(output[0], ancestor=6),
        shell:
            "bash profiles/slurm/ray_job.sh python -m dara.verl_plugin.launch train --run-task {wildcards.run_task}"
            " --method {wildcards.method} --group-size {wildcards.group_size} --seed {wildcards.seed}"
            " --results {params.results} > {log} 2>&1"

    # The shared view: results/paper/runs/<task>/... holds the primary model's metrics (and provenance), the layout
    # the analysis reads at every scale (common.smk's target_metrics); other models stay under <task>-<model>/.
    rule paper_primary_view:
        wildcard_constraints:
            task="[a-z0-9_]+",
            **RUN_WILDCARDS,
        input:
            primary_run_metrics,
        output:
            f"{RESULTS}/runs/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}/metrics.parquet",
        log:
            f"{RESULTS}/logs/paper_primary_view/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}.log",
        localrule: True
        params:
            run=subpath(input[0], parent=True),
            out=subpath(output[0], parent=True),
        shell:
            "(cp {params.run}/config.yaml {params.run}/git_revision.txt {params.out}/"
            " && echo {params.run} > {params.out}/source_run.txt"
            " && cp {input} {params.out}/.metrics.parquet.tmp && mv {params.out}/.metrics.parquet.tmp {output})"
            " > {log} 2>&1"

    for _target in PAPER_EXPERIMENT["targets"]:

        rule:
            name:
                f"paper_{_target}"
            input:
                [f"{RESULTS}/runs/{r.run_task}/{r.method}/G{r.group_size}/seed{r.seed}/metrics.parquet"
                 for r in paper_runs(PAPER_EXPERIMENT, _target)],

    ALL_OUTPUTS += [f"{RESULTS}/runs/{key[0]}/{key[1]}/G{key[2]}/seed{key[3]}/metrics.parquet" for key in PAPER_RUNS]
    ALL_OUTPUTS += [f"{RESULTS}/runs/{r.task}/{r.method}/G{r.group_size}/seed{r.seed}/metrics.parquet"
                    for r in PAPER_RUNS.values() if r.is_primary]
