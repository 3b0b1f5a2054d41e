# What only the paper scale (verl with several models, on a GPU cluster) needs beside train.smk's jobs:
#   snakemake --config scale=paper --profile profiles/slurm
# its datasets (downloaded and converted once) and the shared view of each task's primary model.
# GPU resources (gpu, gpu_model, nodes, runtime, CPUs, memory) come from the run's model in experiments/paper.yaml,
# because verl's n_gpus_per_node/nnodes are part of the study's set-up; partitions and accounts come from the profile.

if EXPERIMENT["backend"] == "verl":
    PAPER_DATA = EXPERIMENT["settings"]["paper"]["data_dir"]

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
            "python -m dara.verl_backend.data --dataset {wildcards.dataset} --out {params.out} > {log} 2>&1"

    if "warm_start" in EXPERIMENT:

        def tiny_prompt_pool(task):
            """The prompt pool of the task's tiny-trainer runs (the scale's setting, schema default filled in, where the
            task has none)."""
            pools = {run.settings["prompt_pool"] for run in RUNS if run.task == task and run.backend != "verl"}
            if len(pools) > 1:
                raise ValueError(f"the tiny-trainer runs of {task} use several prompt pools {sorted(pools)}; "
                                 "verl's data has one training set per task")
            return pools.pop() if pools else EXPERIMENT["settings"]["prompt_pool"]

        # verl on CPU with the tiny tasks (scale verl_cpu): a task's verl parquet data and its warm-started policy
        # made loadable by verl (a chat template), from the warm start of train.smk.
        rule prepare_tiny_verl_data:
            wildcard_constraints:
                task="|".join(EXPERIMENT["tasks"]),
            input:
                # verl on CPU starts from the task's first warm start (its tiny twins' runs too: verl_cpu.yaml)
                f"{RESULTS}/policies/{{task}}/warm_start0/warmstart.json",
            output:
                train=f"{PAPER_DATA}/{{task}}/train.parquet",
                test=f"{PAPER_DATA}/{{task}}/test.parquet",
                policy=f"{PAPER_DATA}/{{task}}/policy/config.json",
            log:
                f"{RESULTS}/logs/prepare_tiny_verl_data/{{task}}.log",
            params:
                experiment=EXPERIMENT_SOURCE,
                policy=subpath(input[0], parent=True),
                out=subpath(output.train, parent=True),
                # verl's training prompts are the tiny twins' prompt pool (the same items, the same count)
                train_items=lambda wildcards: tiny_prompt_pool(wildcards.task),
            shell:
                "python -m dara.verl_backend.tiny_data --experiment {params.experiment:q} --task {wildcards.task}"
                " --policy {params.policy} --out {params.out} --train-items {params.train_items} > {log} 2>&1"

    # The shared view: results/paper/runs/<task>/... holds the primary model's metrics (and provenance), the layout
    # the analysis reads at every scale (dara.runs.Run.shared_view_metrics); other models stay under <task>-<model>/.
    for _run in RUNS:
        if _run.model is None or not _run.primary:
            continue

        rule:
            name:
                f"view_{_run.task}_{_run.method}_G{_run.group_size}_seed{_run.seed}"
            input:
                _run.metrics,
            output:
                _run.shared_view_metrics,
            log:
                f"{RESULTS}/logs/view/{_run.task}_{_run.method}_G{_run.group_size}_seed{_run.seed}.log",
            localrule: True
            params:
                run=_run.run_dir,
                out=subpath(_run.shared_view_metrics, parent=True),
            shell:
                "(cp {params.run}/config.yaml {params.run}/git_revision.txt {params.out}/"
                " && echo {params.run} > {params.out}/source_run.txt"
                " && cp {input} {params.out}/.metrics.parquet.tmp && mv {params.out}/.metrics.parquet.tmp {output})"
                " > {log} 2>&1"

    ALL_OUTPUTS += [run.shared_view_metrics for run in RUNS if run.model is not None and run.primary]
