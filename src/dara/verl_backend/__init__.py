"""Driving verl from outside: a `dara.runs.Run` becomes verl's command line (`launch`), its datasets are prepared
(`data`) and its JSONL logs become the project's ``metrics.parquet`` (`logs`).

This is the paper-scale backend, the counterpart of `dara.tiny.trainer` and `dara.trl`; the code that runs inside
verl's processes (estimators, the ``dara_sync`` trainer, reward functions, the CPU platform) is `dara.verl_plugin`.
"""
