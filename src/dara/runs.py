"""Runs at every scale: what a run is, where its files live, and the run matrix of an experiment.

A run is (task, method, G, seed), plus the model at paper scale and the backend that trains it. Every path of the
project's results is built here and nowhere else:

    results/<scale>[/<backend>]/runs/<task>[-<model>]/<method>/G<G>/seed<seed>/   config.yaml, git_revision.txt,
                                                                                   metrics.parquet, checkpoints/step<N>/
    results/<scale>[/<backend>]/eval/<task>[-<model>]/<method>/G<G>/seed<seed>/step<N>.json
    results/<scale>/policies/<task>/warm_start<k>/                                 warm-start policy number k

``/<backend>`` appears only for a backend other than the scale's own (the TRL runs of a CPU scale:
``results/tiny/trl/runs/...``). ``results`` is `Run.results`: the workflow's tree, or another folder for a run outside
it (a calibration pilot's, a test's), laid out alike. The Snakemake rules, the trainers, the verl launcher, the
evaluation and the analysis all ask this module; none of them writes a path pattern of its own.

    runs = run_matrix(load_experiment("tiny"))           # every distinct run of every target
    run = find_run(experiment, "toolcall", "dara_sym", 8, 0)
    run.run_dir, run.metrics, run.checkpoint_steps, run.eval_files, run.settings

A job receives its runs resolved: the workflow passes each as ``--run '<Run.to_json()>'`` and the job rebuilds it
with `Run.from_json`, reading no experiment file and parsing no path. ``--experiment X --run-dir <folder>`` stays for
commands typed by hand (`add_run_arguments`, `runs_from_arguments`): the folder is looked up in X's run matrix.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dara.experiments import (ExperimentError, checked_warm_start, load_experiment, run_settings, target_backend,
                              verl_run_settings, warm_start_settings)

RESULTS = "results"
# The two folder patterns of a run; `Run` fills them in, `folder_patterns` gives them with Snakemake wildcards.
RUN_DIR = "{root}/runs/{task_dir}/{method}/G{group_size}/seed{seed}"
EVAL_DIR = "{root}/eval/{task_dir}/{method}/G{group_size}/seed{seed}"


@dataclass(frozen=True)
class Run:
    """One training run and its resolved settings (what decides its metrics; see `dara.experiments`)."""

    scale: str
    backend: str
    task: str
    method: str
    group_size: int
    seed: int
    model: str | None = None
    warm_start: int = field(default=0, compare=False)
    """which of its task's independent warm-start policies the run starts from (CPU backends; `warm_start_index`):
    not part of the run's folder, since its seed decides it"""
    settings: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)
    targets: tuple[str, ...] = field(default=(), compare=False)
    scale_backend: str = field(default="tiny", compare=False, repr=False)
    primary: bool = field(default=True, compare=False, repr=False)
    results: str = field(default=RESULTS, repr=False)
    """the results tree the run's folders lie in: the workflow's ``results`` (relative to where it runs), or
    another folder for a run outside it (a calibration pilot, a test)"""

    # --- identity
    @property
    def task_dir(self) -> str:
        """The task folder: ``<task>``, or ``<task>-<model>`` where the scale has several models."""
        return task_folder(self.task, self.model)

    @property
    def name(self) -> str:
        """A readable, unique run name (wandb run names, verl experiment names)."""
        return f"{self.task_dir}-{self.method}-G{self.group_size}-seed{self.seed}"

    # --- paths
    @property
    def root(self) -> str:
        """``<results>/<scale>``, or ``<results>/<scale>/<backend>`` for a backend that is not the scale's own."""
        base = f"{self.results}/{self.scale}"
        return base if self.backend == self.scale_backend else f"{base}/{self.backend}"

    def _fill(self, pattern: str) -> str:
        return pattern.format(root=self.root, task_dir=self.task_dir, method=self.method,
                              group_size=self.group_size, seed=self.seed)

    @property
    def run_dir(self) -> str:
        return self._fill(RUN_DIR)

    @property
    def metrics(self) -> str:
        """metrics.parquet: written last, so it marks the run as complete. Row ``step = s`` is the rollout of the
        policy after s updates, every backend (`check_row_steps`)."""
        return f"{self.run_dir}/metrics.parquet"

    @property
    def shared_view_metrics(self) -> str:
        """Where the analysis reads this run's metrics: its own file, or for a run of its task's primary model at a
        scale with several models, a copy under ``<task>/`` (the layout every scale's analysis reads)."""
        if self.model is None:
            return self.metrics
        return f"{dataclasses.replace(self, model=None).run_dir}/metrics.parquet"

    @property
    def policy_dir(self) -> str | None:
        """The warm-start policy the CPU backends start from (None for a hub model)."""
        if self.backend not in ("tiny", "trl"):
            return None
        return policy_dir(self.scale, self.task, self.results, self.warm_start)

    @property
    def max_new_tokens(self) -> int:
        """The response length cap: the CPU trainers' ``max_new_tokens``, verl's ``data.max_response_length``."""
        if self.backend == "verl":
            return int(self.settings["verl"]["data.max_response_length"])
        return int(self.settings["max_new_tokens"])

    def checkpoint_dir(self, step: int) -> str:
        return f"{self.run_dir}/checkpoints/step{step}"

    @property
    def checkpoint_steps(self) -> list[int]:
        """Steps with a Hugging Face checkpoint: 0, every ``eval_every`` and the last (CPU trainers); every
        ``trainer.save_freq`` and the last (verl)."""
        if self.backend == "verl":
            steps = int(self.settings["steps"])
            every = int(self.settings.get("verl", {}).get("trainer.save_freq", steps))
            return sorted({*range(every, steps + 1, every), steps})
        return cpu_checkpoint_steps(int(self.settings["steps"]), int(self.settings["eval_every"]))

    @property
    def eval_dir(self) -> str:
        return self._fill(EVAL_DIR)

    def eval_file(self, step: int) -> str:
        return f"{self.eval_dir}/step{step}.json"

    @property
    def eval_files(self) -> list[str]:
        return [self.eval_file(step) for step in self.checkpoint_steps]

    # --- what a job receives
    def to_json(self) -> str:
        """The run as its job receives it, settings included, as one JSON object (keys sorted: the same run, the
        same text). ``targets`` and ``primary`` are left out: they say which sweeps list the run, not what it
        computes, so adding a target that shares a run does not rerun it (the JSON is the job's params).
        ``results`` is written only where it is not the workflow's own tree, which every workflow job's run is in."""
        fields = {name: getattr(self, name) for name in _JOB_FIELDS}
        if self.results != RESULTS:
            fields["results"] = self.results
        return json.dumps(fields, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> "Run":
        """The run `to_json` wrote; a ValueError naming what is missing, unknown or malformed."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"a serialised run must be a JSON object (Run.to_json): {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"a serialised run must be a JSON object (Run.to_json), got {type(data).__name__}")
        unknown = sorted(set(data) - set(_JOB_FIELDS) - {"results"})
        missing = sorted(set(_JOB_FIELDS) - set(data))
        if unknown or missing:
            raise ValueError(f"serialised run: unknown fields {unknown}, missing fields {missing} (Run.to_json "
                             f"writes {sorted(_JOB_FIELDS)}, and results where it is not {RESULTS!r})")
        return cls(**data)


# What a job receives of a run (`Run.to_json`): every field but the sweeps that list it (and the results tree, which
# is written only where it is not the workflow's own).
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Run) if f.name not in ("targets", "primary", "results"))


def task_folder(task: str, model: str | None) -> str:
    """A run's task folder (`Run.task_dir`): ``<task>``, or ``<task>-<model>`` for a run of a model."""
    return task if model is None else f"{task}-{model}"


def folder_patterns(scale: str) -> dict[str, str]:
    """Run and evaluation folders of a scale's own backend with Snakemake wildcards {task}, {method},
    {group_size}, {seed} (``task`` is the task folder, ``<task>-<model>`` at paper scale)."""
    fields = dict(root=f"{RESULTS}/{scale}", task_dir="{task}", method="{method}", group_size="{group_size}",
                  seed="{seed}")
    return {"run": RUN_DIR.format(**fields), "eval": EVAL_DIR.format(**fields)}


def cpu_checkpoint_steps(steps: int, eval_every: int) -> list[int]:
    """Steps the CPU trainers (tiny, TRL) save a checkpoint at: 0, every ``eval_every`` and the last."""
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be >= 1, got {steps}, {eval_every}")
    return sorted({0, steps, *range(0, steps, eval_every)})


def most_common_group_size(group_sizes: Iterable[int]) -> int:
    """The group size most runs use, one entry per run (ties: the smallest): the workflow evaluates a task's runs
    at this G, and the tables and one-G figures show it."""
    counts = Counter(int(g) for g in group_sizes)
    if not counts:
        raise ValueError("no runs: no main group size")
    most = max(counts.values())
    return min(g for g, n in counts.items() if n == most)


def policy_dir(scale: str, task: str, results: str = RESULTS, warm_start: int = 0) -> str:
    """Warm-start policy number ``warm_start`` of a task (tokenizer + model, save_pretrained) and its warmstart.json."""
    return f"{results}/{scale}/policies/{task}/warm_start{checked_warm_start(warm_start)}"


def warm_start_index(warm_starts: list[int], seed: int) -> int:
    """The warm start a run of ``seed`` trains from, of a target's ``warm_starts`` (its task's, else [0]): seeds go
    round the list by value (seed % its length), so a run shared by two targets with the same list gets the same
    warm start, and seeds 0-9 over five warm starts give each two seeds."""
    if not warm_starts:
        raise ValueError("warm_starts must name at least one warm start")
    return int(warm_starts[seed % len(warm_starts)])


@dataclass(frozen=True)
class WarmStart:
    """A task's warm-start policy as the evaluation sees it: a policy, not a run, but evaluated by the same code as
    a run's checkpoints (`dara.evaluation.tiny_heldout.evaluate_runs`). Its one checkpoint, step 0, is the policy folder
    (`policy_dir`); its evaluation goes to ``<policy>/heldout_eval/step0.json`` unless ``eval_to`` names another
    folder. Its evaluation records carry method ``warm_start``, G 0 and the warm start's own seed."""

    policy: str
    task: str
    settings: dict[str, Any]
    """the task's warm-start settings (`dara.experiments.warm_start_settings`): task_options, max_new_tokens, seed"""
    eval_to: str | None = None
    """another evaluation folder (None: ``<policy>/heldout_eval``)"""
    warm_start: int = 0
    """its number among the task's warm starts"""
    method = "warm_start"
    group_size = 0
    checkpoint_steps = (0,)

    @property
    def eval_dir(self) -> str:
        return self.eval_to or f"{self.policy}/heldout_eval"

    @classmethod
    def of(cls, experiment: dict[str, Any], task: str, results: str = RESULTS, warm_start: int = 0) -> "WarmStart":
        """The experiment's warm start number ``warm_start`` of ``task``, at its place in the results tree."""
        return cls(policy_dir(experiment["scale"], task, results, warm_start), task,
                   warm_start_settings(experiment, task, warm_start), warm_start=warm_start)

    @property
    def seed(self) -> int:
        return int(self.settings["seed"])

    @property
    def max_new_tokens(self) -> int:
        return int(self.settings["max_new_tokens"])

    def checkpoint_dir(self, step: int) -> str:
        if step != 0:
            raise ValueError(f"a warm start has one checkpoint, step 0, not step {step}")
        return self.policy

    def eval_file(self, step: int) -> str:
        return f"{self.eval_dir}/step{step}.json"


# The last four folders of a run or evaluation folder: <task>[-<model>]/<method>/G<G>/seed<seed> (`Run.run_dir`).
# Task names hold no hyphen (dara.tasks), so a task folder's first hyphen, if any, starts the model.
RUN_TAIL = r"(?P<task>[^/-]+)(?:-(?P<model>[^/]+))?/(?P<method>[^/]+)/G(?P<group_size>\d+)/seed(?P<seed>\d+)$"
_RUN_DIR = re.compile(r"(?:^|/)results/(?P<scale>[^/]+)/(?:(?P<backend>[^/]+)/)?(?:runs|eval)/" + RUN_TAIL)
_TAIL = re.compile(RUN_TAIL)
_EVAL_DIR = re.compile(r"(?:^|/)eval/" + RUN_TAIL)
IDENTITY = ("task", "model", "method", "group_size", "seed")
"""The `Run` fields a run folder's names and its record both state."""


def _typed(found: dict[str, Any]) -> dict[str, Any]:
    return {**found, "group_size": int(found["group_size"]), "seed": int(found["seed"])}


def run_tail(path: str | Path) -> dict[str, Any]:
    """What the last four folders of a run or evaluation folder (``<task>[-<model>]/<method>/G<G>/seed<seed>``,
    wherever the tree lies) say of the run, by `Run`'s field names: task, model (None without one), method,
    group_size, seed. The inverse of `Run.run_dir`'s tail; `run_identity` checks it against the run's record."""
    match = _TAIL.search(Path(path).as_posix().rstrip("/"))
    if match is None:
        raise ValueError(f"{path} does not end in <task>[-<model>]/<method>/G<G>/seed<seed>")
    return _typed(match.groupdict())


def parse_run_dir(path: str | Path) -> dict[str, Any]:
    """What a typed run or evaluation folder (``.../results/<scale>[/<backend>]/{runs,eval}/<task>[-<model>]/
    <method>/G<G>/seed<seed>``) names, by `Run`'s field names: scale, backend (None for the scale's own), task,
    model (None without one), method, group_size, seed. For a path that is the input by nature (``--run-dir``);
    a run folder that exists says who it is in its record (`run_identity`)."""
    text = Path(path).as_posix().rstrip("/")
    match = _RUN_DIR.search(text)
    if match is None:
        raise ValueError(f"{path} is not a run folder results/<scale>[/<backend>]/runs/<task>/<method>/G<G>/seed<S>")
    return _typed(match.groupdict())


# --- a run folder's own record
RECORD = "config.yaml"


def read_run_record(run_dir: str | Path) -> dict[str, Any]:
    """Who a run is, as its ``config.yaml`` records it (`dara.provenance.write_run_provenance`), by `Run`'s field
    names: task, model (None without one), method, group_size, seed, warm_start (0 where the record predates several
    warm starts: one policy per task) and backend. The CPU trainers record these at the top level
    (`dara.tiny.trainer.resolved_config`; TRL adds ``backend: trl``, the tiny trainer names none), the verl launcher
    in its ``run`` block (`dara.verl_backend.launch.train`). A missing or incomplete record is an error naming it."""
    import yaml

    path = Path(run_dir) / RECORD
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: a run folder's config.yaml says which run it holds (every "
                                f"trainer writes it)")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{path} does not hold a mapping")
    verl = isinstance(config.get("run"), dict)
    fields = config["run"] if verl else config
    missing = [name for name in ("task", "method", "group_size", "seed") if name not in fields]
    if missing:
        raise ValueError(f"{path} records no {', '.join(missing)}" + (" in its run block" if verl else ""))
    record = {name: fields.get(name) for name in IDENTITY}
    record["warm_start"] = checked_warm_start(fields.get("warm_start", 0), f"{path}: ")
    record["backend"] = "verl" if verl else str(config.get("backend", "tiny"))
    for name in ("group_size", "seed"):
        if isinstance(record[name], bool) or not isinstance(record[name], int):
            raise ValueError(f"{path}: {name} must be an integer, got {record[name]!r}")
    return record


def check_identity(path: str | Path, record: dict[str, Any], what: str,
                   fields: tuple[str, ...] = IDENTITY) -> dict[str, Any]:
    """``record`` (`Run` field names) checked against the folder names of ``path`` (`run_tail`) in ``fields``;
    returns the folder names. The folder must name the recorded task, method, G and seed, and the recorded model or
    none: a run of a scale with several models is also read from its task's shared view (`Run.shared_view_metrics`),
    a folder without the model. ``what`` names the record in the error."""
    folder = run_tail(path)
    for name in fields:
        if name == "model" and folder["model"] is None:
            continue
        if folder[name] != record.get(name):
            raise ValueError(f"{path}: {what} records {name}={record.get(name)!r} but its folder says "
                             f"{folder[name]!r}")
    return folder


def run_identity(run_dir: str | Path) -> dict[str, Any]:
    """A run folder's identity from its record (`read_run_record`), checked against the folder's names
    (`check_identity`), plus ``task_dir``: the task folder it is read from (`Run.task_dir` in the run's own folder,
    the task alone in its shared view)."""
    record = read_run_record(run_dir)
    folder = check_identity(run_dir, record, RECORD)
    return {**record, "task_dir": task_folder(folder["task"], folder["model"])}


def run_dir_of_evaluation(eval_dir: str | Path) -> Path:
    """The run folder whose checkpoints an evaluation folder holds the evaluations of: ``.../eval/<tail>`` ->
    ``.../runs/<tail>`` (`Run.eval_dir`, `Run.run_dir`)."""
    text = Path(eval_dir).as_posix().rstrip("/")
    match = _EVAL_DIR.search(text)
    if match is None:
        raise ValueError(f"{eval_dir} is not an evaluation folder .../eval/<task>/<method>/G<G>/seed<S>")
    return Path(text[:match.start()] + text[match.start():].replace("eval/", "runs/", 1))


# --- the rows of metrics.parquet, every backend
# Row ``step = s`` describes the rollout sampled from the policy after s updates (row 0: the starting policy), and
# ``checkpoints/step<s>`` is that policy. Each backend converts its own numbering where it writes the file
# (`dara.tiny.trainer` writes it so; `dara.trl.train`: TRL's optimizer steps -> rollout steps;
# `dara.verl_backend.logs`: verl's step k -> row k - 1).
VERL_STEP_COLUMN = "verl/training/global_step"
"""verl's own step number, kept in each row of a verl run's metrics (row s: verl step s + 1)."""


def check_row_steps(frame, source: str | Path, backend: str | None = None) -> None:
    """Refuse a verl run's metrics frame whose rows are numbered as verl numbers its steps (a metrics.parquet
    written before `dara.verl_backend.logs` converted them): row ``s`` must carry verl step ``s + 1``. Frames of the
    CPU trainers (no verl step column) pass; a frame of a run recorded as ``backend="verl"`` must carry the column,
    or nothing would say how its rows are numbered."""
    if VERL_STEP_COLUMN not in frame.columns or not frame[VERL_STEP_COLUMN].notna().any():
        if backend == "verl":
            raise ValueError(f"{source}: a verl run's metrics without verl's own step numbers "
                             f"({VERL_STEP_COLUMN}), so its row numbering cannot be checked; rewrite it from the "
                             f"run's verl_logs/ with `python -m dara.verl_backend.logs <run folder>`")
        return
    logged = frame[VERL_STEP_COLUMN]
    known = logged.notna()
    if not (frame.loc[known, "step"] + 1 == logged[known]).all():
        raise ValueError(f"{source}: its rows are numbered as verl numbers its steps, not as the policy after that "
                         f"many updates (row s = verl step s + 1); rewrite it from the run's verl_logs/ with "
                         f"`python -m dara.verl_backend.logs <run folder>`")


def run_matrix(experiment: dict[str, Any], target: str | None = None) -> list[Run]:
    """Every distinct run of one target, or of all targets, in the experiment's order.

    A run shared by several targets (same coordinates) appears once; if the targets resolve it to different
    settings the experiment is ambiguous and this raises.
    """
    names = list(experiment["targets"]) if target is None else [target]
    runs: dict[Run, Run] = {}
    for name in names:
        if name not in experiment["targets"]:
            raise ExperimentError(f"unknown target {name!r}; targets: {', '.join(experiment['targets'])}")
        for run in _target_runs(experiment, name):
            if run in runs:
                known = runs[run]
                if known.warm_start != run.warm_start:
                    raise ExperimentError(
                        f"run {run.run_dir} is in targets {known.targets[0]!r} and {name!r} with warm starts "
                        f"{known.warm_start} and {run.warm_start}; give the targets the same warm_starts")
                if known.settings != run.settings:
                    raise ExperimentError(
                        f"run {run.run_dir} is in targets {known.targets[0]!r} and {name!r} with different settings;"
                        f" give one of them another seed or task")
                run = dataclasses.replace(known, targets=known.targets + (name,))
            runs[run] = run
    return list(runs.values())


def _target_runs(experiment: dict[str, Any], target: str) -> list[Run]:
    block = experiment["targets"][target]
    backend = target_backend(experiment, target)
    common = dict(scale=experiment["scale"], backend=backend, task=block["task"], targets=(target,),
                  scale_backend=experiment["backend"])
    # Only the CPU trainers start from a warm start of the project's; verl starts from the run's model.
    warm_starts = block.get("warm_starts", experiment["tasks"][block["task"]].get("warm_starts", [0]))
    models: list[str | None] = [None]
    if backend == "verl":
        models = experiment["settings"]["paper"]["target_models"][target]
    runs = []
    for model in models:
        for method in block["methods"]:
            primary = True
            if model is None:
                settings = run_settings(experiment, target, method)
            else:
                settings = verl_run_settings(experiment, target, method, model)
                primary = experiment["settings"]["paper"]["primary_models"][block["task"]] == model
            for group_size in block["group_sizes"]:
                for seed in block["seeds"]:
                    warm_start = warm_start_index(warm_starts, int(seed)) if backend in ("tiny", "trl") else 0
                    runs.append(Run(method=method, group_size=int(group_size), seed=int(seed), model=model,
                                    warm_start=warm_start, settings=copy.deepcopy(settings), primary=primary,
                                    **common))
    return runs


def find_run(experiment: dict[str, Any], task_dir: str, method: str, group_size: int, seed: int,
             backend: str | None = None) -> Run:
    """The one run with these coordinates (``task_dir`` is ``<task>-<model>`` at paper scale)."""
    for run in run_matrix(experiment):
        if (run.task_dir, run.method, run.group_size, run.seed) == (task_dir, method, int(group_size), int(seed)) \
                and backend in (None, run.backend):
            return run
    raise ExperimentError(f"no target of scale {experiment['scale']!r} defines run {task_dir}/{method}/"
                          f"G{group_size}/seed{seed}" + (f" with backend {backend}" if backend else ""))


def find_run_by_dir(experiment: dict[str, Any], run_dir: str | Path) -> Run:
    """The run whose folder is ``run_dir``: relative to the workflow's directory (``results/...``), or any path that
    ends in the run's folder, whose prefix then places the run's results tree."""
    where = parse_run_dir(run_dir)
    if where["scale"] != experiment["scale"]:
        raise ExperimentError(f"{run_dir} is a run folder of scale {where['scale']!r}, not {experiment['scale']!r}")
    run = find_run(experiment, task_folder(where["task"], where["model"]), where["method"], where["group_size"],
                   where["seed"], backend=where["backend"] or experiment["backend"])
    typed = Path(run_dir).as_posix().rstrip("/")
    if not (typed == run.run_dir or typed.endswith("/" + run.run_dir)):
        raise ExperimentError(f"{run_dir} is not the folder of run {run.name} ({run.run_dir})")
    prefix = typed[: -len(run.run_dir)]
    return dataclasses.replace(run, results=prefix + run.results) if prefix else run


def add_run_arguments(parser: argparse.ArgumentParser):
    """A job's runs on its command line: ``--run JSON ...`` (the workflow's) or ``--experiment X --run-dir ...``.
    Returns their mutually exclusive group, for a command with another way to name what it works on."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", nargs="+", metavar="JSON", help="resolved runs (dara.runs.Run.to_json), as the "
                                                               "workflow passes them")
    which.add_argument("--run-dir", nargs="+", help="run folders (dara.runs layout), looked up in --experiment")
    parser.add_argument("--experiment", help="with --run-dir: scale name or experiment yaml")
    return which


def runs_from_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Run]:
    """The runs `add_run_arguments` asked for."""
    if args.run:
        try:
            return [Run.from_json(text) for text in args.run]
        except ValueError as error:
            parser.error(str(error))
    if not args.experiment:
        parser.error("--run-dir needs --experiment (the scale name or experiment yaml the folders belong to)")
    experiment = load_experiment(args.experiment)
    return [find_run_by_dir(experiment, run_dir) for run_dir in args.run_dir]


def _job_name(run: Run, coordinates: str) -> str:
    """A rule name for a job of ``run``'s kind: its backend first where it is not the scale's own."""
    backend = "" if run.backend == run.scale_backend else f"{run.backend}_"
    return f"{backend}{coordinates}".replace("-", "_").replace(".", "")


@dataclass(frozen=True)
class TrainingJob:
    """Runs trained by one process: the seeds of one (backend, task, model, method, G). At the CPU scales a
    process costs seconds of imports, more than a tiny run's training, so a job trains its seeds one after the
    other; at paper scale every run is its own job (its own GPUs)."""

    runs: tuple[Run, ...]

    @property
    def name(self) -> str:
        first = self.runs[0]
        seeds = "" if first.backend != "verl" else f"_seed{first.seed}"
        return _job_name(first, f"{first.task_dir}_{first.method}_G{first.group_size}{seeds}")

    @property
    def backend(self) -> str:
        return self.runs[0].backend


def training_jobs(runs: list[Run]) -> list[TrainingJob]:
    """Runs grouped into training processes (see `TrainingJob`), in run order."""
    jobs: dict[tuple, list[Run]] = {}
    for run in runs:
        key = (run.backend, run.task_dir, run.method, run.group_size) + ((run.seed,) if run.backend == "verl" else ())
        jobs.setdefault(key, []).append(run)
    return [TrainingJob(tuple(sorted(group, key=lambda r: r.seed))) for group in jobs.values()]


@dataclass(frozen=True)
class EvaluationJob:
    """Runs whose checkpoints one CPU evaluation process samples and scores: every run of one (backend, task, G),
    whatever its method and seed. The process's imports (torch and transformers, then bfcl-eval's for the tool
    tasks) cost more than evaluating a seed group's checkpoints at the tiny scale, so it pays them once for all the
    runs a table reads at that G."""

    runs: tuple[Run, ...]

    @property
    def name(self) -> str:
        first = self.runs[0]
        return _job_name(first, f"{first.task_dir}_G{first.group_size}")

    @property
    def backend(self) -> str:
        return self.runs[0].backend


def evaluation_jobs(runs: list[Run]) -> list[EvaluationJob]:
    """Runs grouped into CPU evaluation processes (see `EvaluationJob`), in run order; each job's runs by method
    (in run order), then seed."""
    jobs: dict[tuple, list[Run]] = {}
    for run in runs:
        jobs.setdefault((run.backend, run.task_dir, run.group_size), []).append(run)
    methods = {run.method: index for index, run in reversed(list(enumerate(runs)))}
    return [EvaluationJob(tuple(sorted(group, key=lambda r: (methods[r.method], r.seed)))) for group in jobs.values()]
