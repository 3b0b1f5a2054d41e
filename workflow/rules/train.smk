# Training: one rule per training job of the run layer (dara.runs.training_jobs), at every scale. A job is the
# seeds of one (task, method, G) at the CPU scales, where a process costs seconds of torch/transformers imports,
# more than a tiny run's training; at paper scale each run is its own GPU job. Rule names say what a job trains
# (`train_toolcall_dara_sym_G8`, `train_toolcall_qwen25_15b_dara_sym_G4_seed0`), and a single run is a file target:
#   snakemake results/tiny/runs/toolcall/dara_sym/G8/seed0/metrics.parquet   (it trains its job's other seeds too)
# Every run, resolved with its settings, is the rule's params and goes to the job as JSON (dara.runs.Run.to_json), so
# editing a setting in experiments/<scale>.yaml reruns exactly the runs it changes (Snakemake's params rerun trigger); threads are the rules' own, cluster resources come
# from the run's model (verl) and profiles/slurm.

if "warm_start" in EXPERIMENT:

    # Warm start number k of a task (policies/<task>/warm_start<k>, dara.runs.policy_dir): the runs' seeds are spread
    # over a task's warm starts (targets' warm_starts), so each is an independent draw of the starting policy.
    rule warm_start:
        output:
            f"{RESULTS}/policies/{{task}}/warm_start{{index}}/warmstart.json",
        log:
            f"{RESULTS}/logs/warm_start/{{task}}_warm_start{{index}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/warm_start/{{task}}_warm_start{{index}}.tsv"
        wildcard_constraints:
            task="|".join(EXPERIMENT["tasks"]),
            index=r"\d+",
        priority: 100  # every training job waits for one
        threads: 1
        params:
            settings=lambda wildcards: warm_start_settings(EXPERIMENT, wildcards.task, int(wildcards.index)),
            kernels=KERNEL_PIN,
            out=subpath(output[0], parent=True),
            experiment=EXPERIMENT_SOURCE,
        shell:
            "OMP_NUM_THREADS={threads} python -m dara.tiny.warmstart --experiment {params.experiment:q}"
            " --task {wildcards.task} --warm-start {wildcards.index} --out {params.out} > {log} 2>&1"


# How each backend's job starts (a rule's shell runs when the job runs, after this loop has ended, so everything
# job-specific goes through params): the module that trains, and what runs before it.
TRAIN_COMMANDS = {
    "tiny": {"prefix": "OMP_NUM_THREADS=1", "module": "dara.tiny.trainer --no-progress"},
    "trl": {"prefix": "OMP_NUM_THREADS=1", "module": "dara.trl.train --no-progress"},
    # verl: on a cluster inside a Ray cluster over the job's nodes; the launcher resumes from verl's checkpoints.
    "verl": {"prefix": "bash profiles/slurm/ray_job.sh", "module": "dara.verl_backend.launch train"},
    # verl with `device: cpu` (scale verl_cpu): verl starts a local Ray cluster itself
    "verl_cpu": {"prefix": "", "module": "dara.verl_backend.launch train"},
}


def on_cpu(job):
    """A verl job that runs on this machine's CPU (`device: cpu`), not on a GPU cluster."""
    return job.backend == "verl" and verl_device(job.runs[0].settings) == "cpu"


def training_inputs(job):
    """What a job starts from: the warm-start policies of its seeds (CPU backends) or the prepared datasets (verl; on
    CPU they come with the verl-ready tiny policy, rule prepare_tiny_verl_data)."""
    run = job.runs[0]
    if run.backend != "verl":
        # every warm start the job's seeds train from (a job's seeds spread over its task's warm starts)
        return sorted({f"{seed_run.policy_dir}/warmstart.json" for seed_run in job.runs})
    return [f"{run.settings['data_dir']}/{run.settings['dataset']}/{split}.parquet" for split in ("train", "test")]


def training_resources(job):
    """verl jobs: GPUs, nodes, runtime, CPUs and memory from the run's model in the experiment file. GPUs go to
    Slurm as gres, which counts per node (the executor's `gpu` resource becomes --gpus, a count for the whole job
    that Slurm may spread unevenly over several nodes; verl wants gpus_per_node on each)."""
    if job.backend != "verl":
        return {}
    resources = job.runs[0].settings["resources"]
    return {"gres": f"gpu:{resources['gpu_model']}:{resources['gpus_per_node']}", "nodes": resources["nodes"],
            "runtime": resources["runtime_minutes"], **{k: resources[k] for k in ("cpus_per_task", "mem_mb")
                                                          if k in resources}}


for _job in training_jobs(RUNS):

    rule:
        name:
            f"train_{_job.name}"
        input:
            training_inputs(_job),
        output:
            [run.metrics for run in _job.runs],
            # the tiny trainer's every response (`dara diagnose` reads it; rule diagnostics)
            [f"{run.run_dir}/rollouts.parquet" for run in _job.runs if run.backend == "tiny"],
        log:
            f"{RESULTS}/logs/train/{_job.name}.log",
        benchmark:
            # an opt-in target's job apart: the snapshot's cost of make reproduce counts the other folders
            f"{RESULTS}/benchmarks/{'opt_in/' if all(map(opt_in, _job.runs)) else ''}train/{_job.name}.tsv"
        # Longest first (seed groups of 10 before those of 3), so that no long job starts last on a few cores.
        priority: len(_job.runs)
        # verl on CPU: a trainer, a rollout server and Ray's workers share the machine; `make verl-cpu` runs
        # with --cores 2, so one such job at a time
        threads: 2 if on_cpu(_job) else 1
        resources:
            **training_resources(_job),
        params:
            # each run resolved, settings included (dara.runs.Run.to_json): the job reads no experiment file, and
            # a changed setting changes this text, which reruns the job
            runs=[run.to_json() for run in _job.runs],
            # the CPU kernel pin decides a CPU job's numbers (a GPU job's arithmetic runs on the GPU: no rerun)
            kernels=KERNEL_PIN if _job.backend != "verl" or on_cpu(_job) else "",
            **TRAIN_COMMANDS["verl_cpu" if on_cpu(_job) else _job.backend],
        shell:
            "{params.prefix} python -m {params.module} --run {params.runs:q} > {log} 2>&1"


# Targets are defined after the analysis (Snakefile), so that a target trained by another backend brings the
# backends comparison along: see target_rules() there.
ALL_OUTPUTS += [run.metrics for run in RUNS if not opt_in(run)]
