# Training at the CPU scales (tiny, smoke): one warm start per task, then one job per (task, method, G) that trains
# that group's seeds in one process (importing torch + transformers costs more than a tiny run), and one named
# target per experiment target (`snakemake toolcall`, `snakemake group_size`, ...). A single run is a file target:
#   snakemake results/tiny/runs/toolcall/dara_sym/G8/seed0/metrics.parquet
# (it trains the other seeds of its group too). Threads come from profiles/default; every job uses one torch thread.

if TRAINS_HERE:

    rule warm_start:
        output:
            f"{RESULTS}/policies/{{task}}/warmstart.json",
        log:
            f"{RESULTS}/logs/warm_start/{{task}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/warm_start/{{task}}.tsv"
        wildcard_constraints:
            task="|".join(EXPERIMENT["tasks"]),
        threads: 1
        params:
            out=subpath(output[0], parent=True),
            scale=SCALE,
        shell:
            "OMP_NUM_THREADS={threads} python -m dara.tiny.warmstart --experiment {params.scale:q}"
            " --task {wildcards.task} --out {params.out} > {log} 2>&1"

    for _job in train_jobs():
        _name = f"{_job['task']}_{_job['method']}_G{_job['group_size']}"
        _runs = [(_job["task"], _job["method"], _job["group_size"], seed) for seed in _job["seeds"]]

        rule:
            name:
                f"train_{_name}"
            input:
                policy=f"{policy_dir(_job['task'])}/warmstart.json",
            output:
                [run_metrics(*run) for run in _runs],
            log:
                f"{RESULTS}/logs/train/{_name}.log",
            benchmark:
                f"{RESULTS}/benchmarks/train/{_name}.tsv"
            threads: 1
            params:
                scale=SCALE,
                job=_job,
                policy=subpath(input.policy, parent=True),
                outs=[run_dir(*run) for run in _runs],
            shell:
                "OMP_NUM_THREADS={threads} python -m dara.tiny.trainer --experiment {params.scale:q}"
                " --task {params.job[task]} --method {params.job[method]} --group-size {params.job[group_size]}"
                " --seed {params.job[seeds]} --policy {params.policy} --out {params.outs} > {log} 2>&1"

    for _target in EXPERIMENT["targets"]:

        rule:
            name:
                _target
            input:
                target_metrics(_target),

    ALL_OUTPUTS += target_metrics()
