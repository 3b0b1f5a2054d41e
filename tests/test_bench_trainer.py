"""`make bench-trainer` runs today's experiment settings through an older revision's trainer: what that revision's
task does not take is left out by name, never passed (a TypeError) nor dropped unsaid."""

from benchmarks.bench_trainer import known_options
from dara.experiments import load_experiment
from dara.runs import find_run
from dara.tasks import TASK_CLASSES


class OldTask:
    def __init__(self, *, format_rate: float = 0.05, no_tool_rate: float = 0.15):
        pass


class TaskTakingAnything:
    def __init__(self, **options):
        pass


def test_options_an_old_task_does_not_take_are_named_and_left_out():
    kept, left_out = known_options(OldTask, {"format_rate": 0.012, "wrong_key_rate": 0.65, "no_tool_rate": 0.1})
    assert kept == {"format_rate": 0.012, "no_tool_rate": 0.1}
    assert left_out == ["wrong_key_rate"]


def test_a_task_with_keyword_catch_all_keeps_every_option():
    assert known_options(TaskTakingAnything, {"wrong_key_rate": 0.65}) == ({"wrong_key_rate": 0.65}, [])


def test_this_checkouts_task_takes_every_option_of_the_benchmarked_run():
    run = find_run(load_experiment("tiny"), "toolcall", "dara_sym", 8, 0)
    options = run.settings["task_options"]
    assert options, "the benchmarked run has task options to check"
    assert known_options(TASK_CLASSES["toolcall"], options) == (options, [])
