"""`make bench-trainer` runs today's experiment settings through an older revision's trainer: what that revision's
task does not take is left out by name, never passed (a TypeError) nor dropped unsaid."""

from benchmarks.bench_trainer import with_known_task_options
from dara.experiments import load_experiment
from dara.runs import find_run
from dara.tasks import TASK_CLASSES


class OldTask:
    def __init__(self, seed_source=None, /, format_rate: float = 0.05, *, no_tool_rate: float = 0.15):
        pass


class TaskTakingAnything:
    def __init__(self, **options):
        pass


def _spec(options: dict) -> dict:
    return {"coordinates": {"task": "toolcall", "method": "gdpo", "group_size": 4, "seed": 0},
            "settings": {"steps": 5, "task_options": options}, "policy": "unused"}


def test_options_an_old_task_does_not_take_as_keywords_are_named_and_left_out():
    options = {"format_rate": 0.012, "no_tool_rate": 0.1, "wrong_key_rate": 0.65, "seed_source": 1}
    spec, left_out = with_known_task_options(_spec(options), {"toolcall": OldTask})
    assert spec["settings"]["task_options"] == {"format_rate": 0.012, "no_tool_rate": 0.1}
    assert left_out == ["seed_source", "wrong_key_rate"]  # a positional-only parameter is not a keyword
    assert spec["settings"]["steps"] == 5 and spec["coordinates"]["task"] == "toolcall"


def test_a_task_taking_any_keyword_or_a_revision_without_task_classes_gets_every_option():
    options = {"wrong_key_rate": 0.65}
    assert with_known_task_options(_spec(options), {"toolcall": TaskTakingAnything}) == (_spec(options), [])
    assert with_known_task_options(_spec(options), None) == (_spec(options), [])


def test_this_checkouts_task_takes_every_option_of_the_benchmarked_run():
    run = find_run(load_experiment("tiny"), "toolcall", "dara_sym", 8, 0)
    options = run.settings["task_options"]
    assert options, "the benchmarked run has task options to check"
    spec = {"coordinates": {"task": run.task}, "settings": {"task_options": options}}
    assert with_known_task_options(spec, TASK_CLASSES)[1] == []
