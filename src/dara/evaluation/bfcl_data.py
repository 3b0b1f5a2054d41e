"""BFCL-v4 test entries and possible answers from the data shipped in the bfcl-eval wheel.

Runs in the bfcl environment. `set_scratch_root()` must run before the first bfcl_eval import (bfcl-eval
creates result/ and score/ folders under BFCL_PROJECT_ROOT, by default inside site-packages).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from dara.evaluation.bfcl_aggregate import PAPER_CATEGORIES, category_of


def set_scratch_root() -> str:
    """Point bfcl-eval's project root at a scratch directory unless the caller chose one. A directory made here
    holds only bfcl-eval's own result/ and score/ folders (our modules write their outputs where --out says), so
    it is removed when the process exits rather than left in the temporary folder, one per evaluation process."""
    if "BFCL_PROJECT_ROOT" not in os.environ:
        scratch = tempfile.mkdtemp(prefix="bfcl-root-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        os.environ["BFCL_PROJECT_ROOT"] = scratch
    return os.environ["BFCL_PROJECT_ROOT"]


def _check_category(category: str) -> None:
    if category not in PAPER_CATEGORIES:
        raise ValueError(f"unsupported BFCL category {category!r}; expected one of {PAPER_CATEGORIES}")


def load_entries(category: str, *, for_generation: bool) -> dict[str, dict]:
    """Test entries by id. Generation adds bfcl-eval's language-specific hints to the function docs
    (as `bfcl generate` does); scoring loads them without (as bfcl-eval's evaluator does)."""
    _check_category(category)
    set_scratch_root()
    from bfcl_eval.utils import load_dataset_entry

    entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=for_generation)
    return {entry["id"]: entry for entry in entries}


def load_possible_answers(category: str) -> dict[str, object]:
    """Ground truth by test-entry id (aligned by position, as bfcl-eval aligns them)."""
    _check_category(category)
    set_scratch_root()
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    answers = load_ground_truth_entry(category)
    if len(entries) != len(answers):
        raise ValueError(f"{category}: {len(entries)} entries but {len(answers)} possible answers")
    return {entry["id"]: answer["ground_truth"] for entry, answer in zip(entries, answers)}


def sample_ids(category: str, per_category: int | None) -> list[str]:
    """All ids of a category in file order, or `per_category` of them evenly spaced (deterministic)."""
    ids = list(load_entries(category, for_generation=False))
    if per_category is None or per_category >= len(ids):
        return ids
    if per_category < 1:
        raise ValueError(f"per_category must be >= 1, got {per_category}")
    step = len(ids) / per_category
    return [ids[int(i * step)] for i in range(per_category)]


def is_multi_turn_id(case_id: str) -> bool:
    return category_of(case_id).startswith("multi_turn")
