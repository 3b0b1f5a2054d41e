# Held-out evaluation of every checkpoint: <run's eval folder>/step{N}.json (dara.runs.Run.eval_files), e.g.
#   snakemake results/tiny/eval/toolcall/dara_sym/G8/seed0/step10.json
# This stage appends nothing to ALL_OUTPUTS: the analysis asks for the evaluations it draws.
#
# CPU scales: one job per task and G (dara.runs.evaluation_jobs: every method and seed, e.g. evaluate_toolcall_G4)
#   evaluates all checkpoints of its runs in one process (torch and bfcl-eval load once, which costs more than
#   evaluating a seed group); its runs and the experiment's `evaluation` settings are its params (rerun trigger).
#   verl on CPU (scale verl_cpu) exports tiny policies: its checkpoints are evaluated the same way.
#   Tool-calling tasks are scored by bfcl-eval in .venv-bfcl (a subprocess).
# paper: per checkpoint, generation on GPUs (BFCL: bfcl-eval's inference loop against `vllm serve`; math:
#   vLLM's offline engine), then scoring (BFCL in .venv-bfcl, math in the main environment).

CPU_BACKENDS = ("tiny", "trl")

if "warm_start" in EXPERIMENT:
    # Each warm-start policy (the step 0 of the CPU trainer runs that start from it, the base of every comparison)
    # is evaluated once, with evaluation.warm_start_samples per item; the evaluation jobs copy it into their runs'
    # step0.json.
    rule evaluate_warm_start:
        input:
            f"{RESULTS}/policies/{{task}}/warm_start{{index}}/warmstart.json",
        output:
            f"{RESULTS}/policies/{{task}}/warm_start{{index}}/heldout_eval/step0.json",
        log:
            f"{RESULTS}/logs/evaluate/warm_start_{{task}}_{{index}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/evaluate/warm_start_{{task}}_{{index}}.tsv"
        wildcard_constraints:
            task="|".join(EXPERIMENT["tasks"]),
            index=r"\d+",
        priority: 50  # every evaluation job of the task waits for it
        threads: 1
        params:
            experiment=EXPERIMENT_SOURCE,
            # what samples the warm start (rerun trigger): the trained checkpoints' counts are not its own
            evaluation={key: value for key, value in EXPERIMENT["evaluation"].items()
                        if key not in ("samples", "final_samples")},
            settings=lambda wildcards: warm_start_settings(EXPERIMENT, wildcards.task, int(wildcards.index)),
            kernels=KERNEL_PIN,
        shell:
            "OMP_NUM_THREADS={threads} python -m dara.evaluation.tiny_heldout --experiment {params.experiment:q}"
            " --warm-start {wildcards.task} --warm-start-index {wildcards.index} > {log} 2>&1"


def warm_start_evaluations(job):
    """The warm-start evaluations a CPU trainer's evaluation job copies into its runs' step 0, one per warm start its
    runs start from (none for verl)."""
    if "warm_start" not in EXPERIMENT:
        return []
    policies = sorted({run.policy_dir for run in job.runs if run.policy_dir})
    return [f"{policy}/heldout_eval/step0.json" for policy in policies]


for _job in evaluation_jobs(RUNS):
    if _job.backend not in CPU_BACKENDS and not on_cpu(_job):
        continue

    rule:
        name:
            f"evaluate_{_job.name}"
        input:
            metrics=[run.metrics for run in _job.runs],
            warm_start=warm_start_evaluations(_job),
        output:
            [path for run in _job.runs for path in run.eval_files],
        log:
            f"{RESULTS}/logs/evaluate/{_job.name}.log",
        benchmark:
            f"{RESULTS}/benchmarks/evaluate/{_job.name}.tsv"
        priority: len(_job.runs)  # longest first, as training (it waits for all of its runs' training)
        threads: 1
        params:
            runs=[run.to_json() for run in _job.runs],  # resolved, as the training jobs receive them
            kernels=KERNEL_PIN,
            evaluation=json.dumps(EXPERIMENT["evaluation"], sort_keys=True),
        shell:
            "OMP_NUM_THREADS={threads} python -m dara.evaluation.tiny_heldout --run {params.runs:q}"
            " --evaluation {params.evaluation:q} --warm-start-eval {input.warm_start} > {log} 2>&1"

if any(not on_cpu(job) for job in training_jobs(RUNS) if job.backend == "verl"):
    # verl runs: the rules call `vllm` of the GPU environment (on PATH, or `--config vllm=...`)
    # and .venv-bfcl (`--config bfcl_python=...`). A run's metrics.parquet marks its training, and so its
    # checkpoints run_dir/checkpoints/step{N}/ (Hugging Face folders), as complete.
    VLLM = config.get("vllm", "vllm")
    BFCL_PYTHON = config.get("bfcl_python", ".venv-bfcl/bin/python")
    # The run layer's folders with wildcards (dara.runs.Run.run_dir / eval_dir), one rule per kind of checkpoint job.
    RUN, EVAL = folder_patterns(SCALE).values()
    CHECKPOINT_JOB = "{task}/{method}/G{group_size}/seed{seed}/step{step}"

    wildcard_constraints:
        step=r"\d+",

    rule bfcl_generate:
        input:
            f"{RUN}/metrics.parquet",
        output:
            f"{EVAL}/bfcl/step{{step}}.outputs.json",
        log:
            f"{RESULTS}/logs/bfcl_generate/{CHECKPOINT_JOB}.log",
        benchmark:
            f"{RESULTS}/benchmarks/bfcl_generate/{CHECKPOINT_JOB}.tsv"
        threads: 8
        resources:
            gpu=1,
        params:
            checkpoint=f"{RUN}/checkpoints/step{{step}}",
        shell:
            # vLLM as in the paper's BFCL protocol (docs/evaluation.md: bf16, util 0.85, eager, 64 sequences, 32k context, seed 0) on a free port.
            "(port=$(python -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])');"
            " {VLLM} serve {params.checkpoint} --dtype bfloat16 --max-model-len 32768 --gpu-memory-utilization 0.85"
            " --enforce-eager --max-num-seqs 64 --seed 0 --port $port & server=$!; trap 'kill $server' EXIT;"
            # a server that dies while loading fails the job instead of leaving it polling until its time limit
            " until curl -sf http://127.0.0.1:$port/health > /dev/null; do kill -0 $server || exit 1; sleep 5; done;"
            " {BFCL_PYTHON} -m dara.evaluation.bfcl_generate --checkpoint {params.checkpoint}"
            " --base-url http://127.0.0.1:$port/v1 --out {output}) > {log} 2>&1"

    rule bfcl_score:
        input:
            f"{EVAL}/bfcl/step{{step}}.outputs.json",
        output:
            f"{EVAL}/step{{step}}.json",
        wildcard_constraints:
            task="toolcall3?-.+",
        log:
            f"{RESULTS}/logs/bfcl_score/{CHECKPOINT_JOB}.log",
        threads: 1
        shell:
            "{BFCL_PYTHON} -m dara.evaluation.bfcl_score --outputs {input} --out {output} > {log} 2>&1"

    rule math_generate:
        input:
            f"{RUN}/metrics.parquet",
        output:
            f"{EVAL}/math/step{{step}}.samples.jsonl",
        log:
            f"{RESULTS}/logs/math_generate/{CHECKPOINT_JOB}.log",
        benchmark:
            f"{RESULTS}/benchmarks/math_generate/{CHECKPOINT_JOB}.tsv"
        threads: 8
        resources:
            gpu=2,
        params:
            checkpoint=f"{RUN}/checkpoints/step{{step}}",
        shell:
            # Samples accumulate per benchmark in .partial (a rerun resumes there); the output appears complete.
            "python -m dara.evaluation.math_eval generate --checkpoint {params.checkpoint} --out {output}.partial"
            " --tensor-parallel {resources.gpu} > {log} 2>&1 && mv {output}.partial {output}"

    rule math_score:
        input:
            f"{EVAL}/math/step{{step}}.samples.jsonl",
        output:
            f"{EVAL}/step{{step}}.json",
        wildcard_constraints:
            task="math_length-.+",
        log:
            f"{RESULTS}/logs/math_score/{CHECKPOINT_JOB}.log",
        threads: 1
        shell:
            "python -m dara.evaluation.math_eval score --samples {input} --out {output} > {log} 2>&1"
