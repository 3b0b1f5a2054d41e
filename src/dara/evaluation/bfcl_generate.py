"""Generate BFCL-v4 outputs for one checkpoint through bfcl-eval's own inference loop (paper scale).

    vllm serve CKPT --dtype bfloat16 --max-model-len 32768 --gpu-memory-utilization 0.85 \
        --enforce-eager --max-num-seqs 64 --seed 0 &                      # GPU environment
    .venv-bfcl/bin/python -m dara.evaluation.bfcl_generate --checkpoint CKPT \
        --base-url http://127.0.0.1:8000/v1 --out outputs.json           # then bfcl_score on outputs.json

bfcl-eval drives each entry (single turn, or multi-turn with its simulated APIs executing the decoded
calls between steps) and our `ToolRLHandler` builds the ToolRL prompt and decodes `<tool_call>` lines;
completions come from the OpenAI-compatible vLLM server at T 0.6, top-p 0.95, top-k -1, seed 0, at most
8,192 new tokens (docs/evaluation.md). A request the server rejects (prompt + completion over the 32k context)
makes the case a failure: an empty output, or a multi-turn trajectory cut short.

Resumable: finished cases are appended to `<out>.partial.jsonl`; a rerun skips them. `outputs.json`
(`{"cases": [{"id", "outputs"}]}`, the input of `bfcl_score`) is written last, atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dara.evaluation.bfcl_aggregate import PAPER_CATEGORIES
from dara.evaluation.bfcl_data import is_multi_turn_id, load_entries, sample_ids, set_scratch_root
from dara.io import write_json_atomic


def generate_case(handler, entry: dict):
    """bfcl-eval's inference for one entry -> outputs (str, or per-turn lists of step outputs)."""
    import openai

    try:
        result, _metadata = handler.inference(entry, include_input_log=False, exclude_state_log=True)
    except openai.BadRequestError:  # context overflow: counted as a failure, as in the paper's protocol
        return [] if is_multi_turn_id(entry["id"]) else ""
    return result


def load_finished_cases(partial: Path) -> dict[str, object]:
    """Outputs by case id from the append-only ``partial`` file of an earlier attempt.

    A job killed while appending leaves its last line cut (no newline): that case is dropped and the file is
    truncated to its last whole line, so the rerun appends after it. A bad line anywhere else is an error.
    """
    if not partial.exists():
        return {}
    data = partial.read_bytes()
    whole = data.rfind(b"\n") + 1
    if whole < len(data):
        with partial.open("r+b") as handle:
            handle.truncate(whole)
    done: dict[str, object] = {}
    for number, line in enumerate(data[:whole].decode().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{partial}:{number}: not a JSON line ({error})") from None
        done[record["id"]] = record["outputs"]
    return done


def generate(checkpoint: str, base_url: str, out: Path, categories: Sequence[str], workers: int = 48,
             per_category: int | None = None) -> None:
    set_scratch_root()
    os.environ["REMOTE_OPENAI_BASE_URL"] = base_url
    from dara.evaluation.bfcl_handler import make_handler

    handler = make_handler(checkpoint)
    partial = out.with_name(out.name + ".partial.jsonl")
    done = load_finished_cases(partial)
    entries = []
    for category in categories:
        by_id = load_entries(category, for_generation=True)
        entries += [by_id[case_id] for case_id in sample_ids(category, per_category)]
    todo = [entry for entry in entries if entry["id"] not in done]
    lock = threading.Lock()
    out.parent.mkdir(parents=True, exist_ok=True)

    def run(entry):
        outputs = generate_case(handler, entry)
        with lock, partial.open("a") as handle:
            handle.write(json.dumps({"id": entry["id"], "outputs": outputs}) + "\n")
        return entry["id"], outputs

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for case_id, outputs in pool.map(run, todo):
            done[case_id] = outputs
    write_json_atomic(out, {"checkpoint": checkpoint, "cases": [{"id": e["id"], "outputs": done[e["id"]]} for e in entries]})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="model name the vLLM server serves (its path)")
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--categories", nargs="+", default=list(PAPER_CATEGORIES), choices=PAPER_CATEGORIES)
    parser.add_argument("--workers", type=int, default=48, help="concurrent requests (paper: 48)")
    parser.add_argument("--per-category", type=int, default=None, help="evenly spaced sample per category (smoke runs)")
    args = parser.parse_args(argv)
    generate(args.checkpoint, args.base_url, args.out, args.categories, args.workers, args.per_category)


if __name__ == "__main__":
    main()
