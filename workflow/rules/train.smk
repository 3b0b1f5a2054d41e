# Training at the CPU scales (tiny, smoke): one warm start per task, one job per run, one named target per
# experiment target (`snakemake toolcall`, `snakemake group_size`, ...). A single run is a file target:
#   snakemake results/tiny/runs/toolcall/dara_sym/G8/seed0/metrics.parquet
# Threads come from profiles/default; every job runs torch with one thread.

if TRAINS_HERE:

    wildcard_constraints:
        task="|".join(EXPERIMENT["tasks"]),
        method="[a-z0-9_]+",
        group_size=r"\d+",
        seed=r"\d+",

    rule warm_start:
        output:
            f"{RESULTS}/policies/{{task}}/warmstart.json",
        log:
            f"{RESULTS}/logs/warm_start/{{task}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/warm_start/{{task}}.tsv"
        threads: 1
        params:
            out=subpath(output[0], parent=True),
            scale=SCALE,
        shell:
            "OMP_NUM_THREADS={threads} python -m dara.tiny.warmstart --experiment {params.scale:q} --task {wildcards.task}"
            " --out {params.out} > {log} 2>&1"

    rule train:
        input:
            policy=f"{RESULTS}/policies/{{task}}/warmstart.json",
        output:
            f"{RESULTS}/runs/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}/metrics.parquet",
        log:
            f"{RESULTS}/logs/train/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/train/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}.tsv"
        threads: 1
        params:
            policy=subpath(input.policy, parent=True),
            out=subpath(output[0], parent=True),
            scale=SCALE,
        shell:
            "OMP_NUM_THREADS={threads} python -m dara.tiny.trainer --experiment {params.scale:q}"
            " --task {wildcards.task} --method {wildcards.method} --group-size {wildcards.group_size}"
            " --seed {wildcards.seed} --policy {params.policy} --out {params.out} > {log} 2>&1"

    for _target in EXPERIMENT["targets"]:

        rule:
            name:
                _target
            input:
                target_metrics(_target),

    ALL_OUTPUTS += target_metrics()
