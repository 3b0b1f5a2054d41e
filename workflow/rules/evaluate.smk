# Held-out evaluation of every checkpoint: results/{scale}/eval/{task}/{method}/G{G}/seed{seed}/step{N}.json
# (dara.evaluation.layout). Each checkpoint file is a target, e.g.
#   snakemake results/tiny/eval/toolcall/dara_sym/G8/seed0/step30.json
# This stage appends nothing to ALL_OUTPUTS: the analysis asks for what it draws with
#   eval_files(target=None, task=None)  -> every checkpoint's evaluation file of a target's runs.
#
# tiny/smoke: one job per seed group (task, method, G) evaluates all checkpoints of its runs in one process (torch
#   and bfcl-eval load once); its outputs are those runs' step{N}.json files. Tool-calling tasks are scored by
#   bfcl-eval in .venv-bfcl (a subprocess).
# paper: per checkpoint, generation on GPUs (BFCL: bfcl-eval's inference loop against `vllm serve`; math:
#   vLLM's offline engine), then scoring (BFCL in .venv-bfcl, math in the main environment).
from functools import partial

from dara.evaluation import layout

eval_files = partial(layout.eval_files, EXPERIMENT)

if TRAINS_HERE:
    # One rule per seed group (task, method, G), like training: its outputs are every checkpoint file of its runs,
    # so each checkpoint is still a target, while torch and bfcl-eval are imported once per group.
    _RUNS = {(r["task"], r["method"], r["group_size"], r["seed"]): r for r in target_runs()}
    for _job in train_jobs():
        _name = f"{_job['task']}_{_job['method']}_G{_job['group_size']}"
        _keys = [(_job["task"], _job["method"], _job["group_size"], seed) for seed in _job["seeds"]]
        _runs = [_RUNS[key] for key in _keys]

        rule:
            name:
                f"evaluate_{_name}"
            input:
                [run_metrics(*key) for key in _keys],
            output:
                [path for r in _runs for path in layout.run_eval_files(EXPERIMENT, r)],
            log:
                f"{RESULTS}/logs/evaluate/{_name}.log",
            benchmark:
                f"{RESULTS}/benchmarks/evaluate/{_name}.tsv"
            threads: 1
            params:
                runs=[run_dir(*key) for key in _keys],
                outs=[layout.eval_dir(SCALE, *key) for key in _keys],
            shell:
                "OMP_NUM_THREADS={threads} python -m dara.evaluation.tiny --run-dir {params.runs}"
                " --out-dir {params.outs} > {log} 2>&1"

else:
    # Paper scale (backend verl). The rules call `vllm` of the GPU environment (on PATH, or `--config vllm=...`)
    # and .venv-bfcl (`--config bfcl_python=...`). A run's metrics.parquet marks its training, and so its
    # checkpoints run_dir/checkpoints/step{N}/ (Hugging Face folders), as complete.
    VLLM = config.get("vllm", "vllm")
    BFCL_PYTHON = config.get("bfcl_python", ".venv-bfcl/bin/python")
    RUN = f"{RESULTS}/runs/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}"
    EVAL = f"{RESULTS}/eval/{{task}}/{{method}}/G{{group_size}}/seed{{seed}}"
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
            # vLLM as in PAPER.md D (bf16, util 0.85, eager, 64 sequences, 32k context, seed 0) on a free port.
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
