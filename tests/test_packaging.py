"""The package as a user gets it: `pip install dara[verl]`, `dara[trl]` or `dara[pipeline]` from a wheel, outside
any checkout. Its metadata declares what the library needs (ranges that the study's pinned environments satisfy;
the `pipeline` extra covers every third-party import of the CPU pipeline's code), the wheel holds no test-only
code, and the installed wheel works from a folder that is not the repository: the estimators, the experiment
schema, experiment files by path, `dara diagnose`, verl's entry point; a scale name gets an error that says why.
With DARA_TEST_CLEAN_VENV=1, `pip install dara[pipeline]` into a clean environment trains a tiny run."""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
# the installed environment sees no source folder on PYTHONPATH (a worktree's tests may set one)
OUTSIDE = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(*files: str) -> dict[str, str]:
    """Exact pins (name==version) of envs/ requirement files, by canonical name."""
    found = {}
    for name in files:
        for line in (ROOT / "envs" / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                requirement = Requirement(line)
                [specifier] = requirement.specifier
                assert specifier.operator == "==", f"envs/{name}: {line} is not an exact pin"
                found[canonicalize_name(requirement.name)] = specifier.version
    return found


@pytest.mark.parametrize("requirements, environment", [
    (PROJECT["dependencies"], ("cpu.txt", "cpu-nodeps.txt")),
    (PROJECT["optional-dependencies"]["trl"], ("cpu.txt", "trl.txt", "verl-cpu.txt")),
    (PROJECT["optional-dependencies"]["verl"], ("cpu.txt", "verl-cpu.txt", "verl-cpu-nodeps.txt")),
    (PROJECT["optional-dependencies"]["verl"], ("gpu.txt",)),
    (PROJECT["optional-dependencies"]["pipeline"], ("cpu.txt", "cpu-nodeps.txt")),
    (PROJECT["optional-dependencies"]["bfcl"], ("bfcl.txt", "bfcl-nodeps.txt")),
], ids=["core-cpu", "trl-cpu", "verl-cpu", "verl-gpu", "pipeline-cpu", "bfcl"])
def test_the_pinned_environments_satisfy_the_declared_ranges(requirements, environment):
    pinned = pins(*environment)
    for line in requirements:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name == "torch" and environment == ("gpu.txt",):
            continue
        assert name in pinned, f"{line}: not pinned in envs/{' or envs/'.join(environment)}"
        assert requirement.specifier.contains(pinned[name], prereleases=True), \
            f"{line}: envs/ pins {name}=={pinned[name]}"


def test_the_verl_extra_pins_the_release_the_plugin_was_written_for():
    from dara.verl_plugin import VERL_VERSION

    verl = [Requirement(line) for line in PROJECT["optional-dependencies"]["verl"] if line.startswith("verl")]
    assert [str(r.specifier) for r in verl] == [f"=={VERL_VERSION}"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout's pyproject.toml and src/."""
    scratch = tmp_path_factory.mktemp("wheel")
    source = scratch / "source"  # a copy, so that building writes no build/ or egg-info into the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = scratch / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(source)], check=True, capture_output=True, timeout=300)
    [built] = wheels.glob("dara-*.whl")
    return built


def wheel_modules(wheel: Path) -> dict[str, str]:
    """The wheel's Python files (path inside the wheel: source text)."""
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name).decode() for name in archive.namelist() if name.endswith(".py")}


def declared_requirements(wheel: Path) -> tuple[set[str], dict[str, set[str]]]:
    """Canonical names the wheel's METADATA requires: (core, {extra: names})."""
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(archive.read(metadata).decode())
    core, extras = set(), {}
    for extra in message.get_all("Provides-Extra") or []:
        extras[extra] = set()
    for line in message.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if requirement.marker is None:
            core.add(name)
        for extra in extras:
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                extras[extra].add(name)
    return core, extras


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel built from this checkout, its dependencies taken from the test
    environment's site-packages (a .pth line: that folder's own .pth files, the editable install among them, are
    not read), so `dara` can come from the wheel only. Returns the environment's python."""
    scratch = tmp_path_factory.mktemp("installed")
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "test_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    return python


def run_outside(python: Path, tmp_path: Path, code: str) -> dict:
    result = subprocess.run([str(python), "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env=OUTSIDE)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_installed_wheel_works_outside_the_checkout(installed, tmp_path):
    found = run_outside(installed, tmp_path, f"""
        import json
        from importlib.metadata import entry_points, requires
        import dara, dara.advantages, dara.experiments, dara.trl
        import torch
        rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
        result = dara.advantages.compute_advantages("dara_sym", rewards, torch.tensor([0, 0, 1, 1]))
        try:
            dara.experiments.load_experiment("tiny")
            scale_name = "loaded"
        except FileNotFoundError as error:
            scale_name = str(error)
        smoke = dara.experiments.load_experiment({str(ROOT / "experiments" / "smoke.yaml")!r})
        print(json.dumps({{
            "module": dara.__file__, "advantages": [round(float(a), 6) for a in result.advantages],
            "schema": "properties" in dara.experiments.schema(), "scale_name": scale_name,
            "smoke_targets": sorted(smoke["targets"]),
            "plugins": [e.value for e in entry_points(group="verl.plugins") if e.name == "dara"],
            "requires": requires("dara"),
        }}))
    """)
    assert Path(found["module"]).is_relative_to(installed.parents[1]), found["module"]
    assert not Path(found["module"]).is_relative_to(ROOT)
    # the same estimator as the checkout's
    import torch

    from dara.advantages import compute_advantages

    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    expected = compute_advantages("dara_sym", rewards, torch.tensor([0, 0, 1, 1])).advantages
    assert found["advantages"] == [round(float(a), 6) for a in expected]
    assert found["schema"] and "smoke" not in found["scale_name"]
    assert "an installed package has no checkout" in found["scale_name"]
    assert "path of an experiment yaml" in found["scale_name"] and "DARA_EXPERIMENTS_DIR" in found["scale_name"]
    assert "toolcall" in found["smoke_targets"]
    assert found["plugins"] == ["dara.verl_plugin.entry"]
    declared = [Requirement(line) for line in found["requires"]]
    assert {canonicalize_name(r.name) for r in declared if r.marker is None} >= {"torch", "numpy", "pandas"}
    extras = {canonicalize_name(r.name): str(r.marker) for r in declared if r.marker is not None}
    assert 'extra == "verl"' in extras["verl"] and 'extra == "trl"' in extras["trl"]


def test_the_installed_console_script_diagnoses_a_rollout_file(installed, tmp_path):
    rows = ["group,format,correctness"] + [f"{g},{int(g == 0 and k == 0)},{(g + k) % 3}"
                                           for g in range(4) for k in range(4)]
    (tmp_path / "rollouts.csv").write_text("\n".join(rows) + "\n")
    result = subprocess.run([str(installed.with_name("dara")), "diagnose", "rollouts.csv", "--out", "report",
                             "--group", "group", "--reward", "format", "--reward", "correctness"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300, env=OUTSIDE)
    assert result.returncode == 0, result.stderr[-3000:]
    import pandas as pd

    table = pd.read_csv(tmp_path / "report" / "diagnostics.csv").set_index("reward")
    assert table.loc["format", "density"] == pytest.approx(0.25) and table.loc["correctness", "density"] == 1.0
    assert table.loc["format", "verdict"] == "sparse"


# ---------------------------------------------------------------- what the wheel holds

# Test-only code that sat in the package once, and where it lives now: the wheel must not ship it again.
TEST_ONLY_MODULES = {
    "dara/evaluation/bfcl_reference.py": "ground truth in ToolRL's format for the BFCL scoring tests "
                                         "(tests/bfcl_reference.py)",
}
TEST_ONLY_NAMES = {
    ("dara/experiments.py", "default_warm_start"): "the schema's warm-start keywords for the tests "
                                                   "(tests/experiment_defaults.py)",
    ("dara/experiments.py", "default_evaluation"): "the schema's evaluation sampling for the tests "
                                                   "(tests/experiment_defaults.py)",
    ("dara/verl_plugin/cpu_backend/hf_rollout.py", "batch_sizes"): "the rows of every generate call, which "
                                                                    "tests/test_hf_rollout.py records itself",
}
TEST_FRAMEWORKS = {"pytest", "_pytest", "hypothesis"}  # a module that imports one of these is test code


def defined_names(source: str) -> set[str]:
    """Functions and classes (any depth), module-level assignments and ``self.<name>`` attributes of a source."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id == "self":
                    names.add(target.attr)
    return names


def top_level_imports(source: str) -> set[str]:
    """Top-level names of the absolute imports of a source, those inside functions included."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_wheel_holds_no_test_only_code(wheel):
    modules = wheel_modules(wheel)
    assert "dara/advantages.py" in modules and "dara/tiny/trainer.py" in modules  # read the right archive
    for path, reason in TEST_ONLY_MODULES.items():
        assert path not in modules, f"the wheel ships {path}: {reason}"
    for (path, name), reason in TEST_ONLY_NAMES.items():
        assert name not in defined_names(modules[path]), f"the wheel's {path} defines {name}: {reason}"
    for path, source in modules.items():
        parts = path.split("/")
        filename = parts[-1]
        assert not (filename.startswith("test_") or filename.endswith("_test.py") or filename == "conftest.py"), \
            f"the wheel ships a test module: {path}"
        assert not any(part in ("tests", "testing") or "fixture" in part for part in parts), \
            f"the wheel ships test support: {path}"
        frameworks = top_level_imports(source) & TEST_FRAMEWORKS
        assert not frameworks, f"{path} imports {sorted(frameworks)}: test code, which belongs under tests/"


# ---------------------------------------------------------------- the `pipeline` extra

SRC = ROOT / "src"
# The CPU pipeline's jobs (scales tiny and smoke): each module by the workflow command that starts it.
PIPELINE_JOBS = {
    "dara.tiny.warmstart": "python -m dara.tiny.warmstart",
    "dara.tiny.trainer": '"module": "dara.tiny.trainer',
    "dara.evaluation.tiny_heldout": "python -m dara.evaluation.tiny_heldout",
    "dara.diagnose": "python -m dara diagnose",
}
# Third-party imports of the pipeline's code that the extra leaves out on purpose, each with where it is used.
LEFT_OUT = {
    "wandb": "the tiny trainer's `wandb: true` switch only (false by default and in every experiment file)",
    "datasets": "dara.evaluation.math_eval's hub benchmarks (paper-scale math evaluation)",
    "vllm": "dara.evaluation.math_eval's sampling (paper-scale math evaluation, on GPUs)",
}
WORKFLOW_FILES = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
_SNAKEMAKE_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.MULTILINE)


def imported_modules(source: str, module: str | None = None, is_package: bool = False) -> set[str]:
    """Absolute dotted names a source imports, lazy imports inside functions included (``from a import b``:
    ``a`` and ``a.b``; relative imports resolved against ``module``). Snakemake files, which are not Python,
    by their import lines."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {a or b for a, b in _SNAKEMAKE_IMPORT.findall(source)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def dara_source(name: str) -> tuple[Path, bool] | None:
    """(file, is a package) of a module of the checkout's dara package; None for a name that is not a module."""
    folder = SRC.joinpath(*name.split("."))
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py", True
    if folder.with_suffix(".py").is_file():
        return folder.with_suffix(".py"), False
    return None


def pipeline_imports() -> tuple[set[str], dict[str, set[str]]]:
    """The dara modules the pipeline runs (its jobs' modules, and what they, the analysis scripts and the workflow
    import, lazily or not, followed through dara) and the third-party top-level modules those and the scripts
    and workflow import: ({dara module}, {top-level module: {importer}})."""
    pending = [(str(path.relative_to(ROOT)), path.read_text(), None, False)
               for path in [*sorted((ROOT / "analysis").glob("*.py")), *WORKFLOW_FILES]]
    for name in PIPELINE_JOBS:
        path, is_package = dara_source(name)
        pending.append((name, path.read_text(), name, is_package))
    seen, third_party = set(PIPELINE_JOBS), {}
    while pending:
        importer, source, module, is_package = pending.pop()
        for name in imported_modules(source, module, is_package):
            top = name.split(".")[0]
            if top == "dara":
                parts = name.split(".")
                for depth in range(1, len(parts) + 1):  # a module's packages run their __init__ first
                    prefix = ".".join(parts[:depth])
                    found = dara_source(prefix)
                    if found and prefix not in seen:
                        seen.add(prefix)
                        pending.append((prefix, found[0].read_text(), prefix, found[1]))
            elif top not in sys.stdlib_module_names and top != "__future__":
                third_party.setdefault(top, set()).add(importer)
    return seen, third_party


def test_the_pipeline_jobs_named_here_are_the_workflows():
    rules = "\n".join(path.read_text() for path in WORKFLOW_FILES)
    for module, command in PIPELINE_JOBS.items():
        assert command in rules, f"no workflow rule runs {module} ({command!r}): update PIPELINE_JOBS"


def test_the_pipeline_extra_declares_every_import_of_the_pipelines_code(wheel):
    core, extras = declared_requirements(wheel)
    assert {"pipeline", "bfcl", "trl", "verl"} <= set(extras)
    declared = core | extras["pipeline"]
    modules, third_party = pipeline_imports()
    # Importing the jobs' modules loads no dara module that the reading above missed (an import by a computed name)
    loaded = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import importlib, json, sys
        for name in {sorted(PIPELINE_JOBS)!r}:
            importlib.import_module(name)
        print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] == "dara")))
    """)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    missed = set(json.loads(loaded.stdout.strip().splitlines()[-1])) - modules
    assert not missed, f"the pipeline's modules load {sorted(missed)}, which reading their imports did not find"
    assert {"torch", "transformers", "snakemake", "statsmodels"} <= set(third_party)  # the reading reads
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for top, importers in sorted(third_party.items()):
        if top in LEFT_OUT:
            continue
        provided_by = {canonicalize_name(name) for name in distributions.get(top, [])}
        assert provided_by, f"{top} (imported by {sorted(importers)}) comes from no installed distribution"
        if not provided_by & declared:
            undeclared[top] = (sorted(provided_by), sorted(importers))
    assert not undeclared, f"imported by the pipeline's code, declared by neither the core nor [pipeline]: {undeclared}"
    for top, reason in LEFT_OUT.items():  # the list stays true: still imported, still not declared
        assert top in third_party, f"LEFT_OUT names {top}, which the pipeline's code no longer imports"
        assert canonicalize_name(top) not in declared, f"{top} is declared after all: drop it from LEFT_OUT"


def test_the_bfcl_extra_is_the_release_the_bfcl_environment_installs():
    [requirement] = [Requirement(line) for line in PROJECT["optional-dependencies"]["bfcl"]]
    assert canonicalize_name(requirement.name) == "bfcl-eval"
    assert str(requirement.specifier) == f"=={pins('bfcl-nodeps.txt')['bfcl-eval']}"


# ---------------------------------------------------------------- a clean install of [pipeline] (opt-in)

CLEAN_VENV = os.environ.get("DARA_TEST_CLEAN_VENV") == "1"
# A warm start small enough for seconds (as tests/test_kernels.py's) and the run the trainer's command line gets.
TINY_RUN = textwrap.dedent("""
    import sys
    from pathlib import Path

    sys.path.insert(0, sys.argv[2])  # the tests' folder: the schema's warm-start defaults (experiment_defaults)
    from experiment_defaults import small_warm_start

    from dara.experiments import default_settings
    from dara.runs import Run
    from dara.tiny.warmstart import warm_start

    out, options = Path(sys.argv[1]), {"tag_rate": 0.5}
    warm_start("act_critic", options, out / "policy", **small_warm_start())
    settings = dict(default_settings(), task_options=options, steps=2, responses_per_step=16, max_new_tokens=20,
                    prompt_pool=100, eval_every=2, state_every=2)
    run = Run(scale="tiny", backend="tiny", task="act_critic", method="dara_sym", group_size=4, seed=0,
              settings=settings, results=str(out / "results"))
    print(run.to_json())
""")


def train_tiny_run(python: Path, work: Path) -> Path:
    """A warm start, then 2 steps of the tiny trainer through its command line (as the workflow starts it), then
    `dara diagnose` on its rollouts, all with ``python``, from a folder outside the checkout. Returns the run's
    folder."""
    def run(*args: str) -> str:
        done = subprocess.run([str(python), *args], cwd=work, capture_output=True, text=True, timeout=900,
                              env={**OUTSIDE, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, (args[:2], done.stderr[-4000:])
        return done.stdout

    run_json = run("-c", TINY_RUN, str(work / "out"), str(ROOT / "tests")).strip().splitlines()[-1]
    run("-m", "dara.tiny.trainer", "--run", run_json, "--policy", str(work / "out" / "policy"), "--no-progress")
    [metrics] = Path(json.loads(run_json)["results"]).rglob("metrics.parquet")
    run("-m", "dara", "diagnose", str(metrics.with_name("rollouts.parquet")), "--group", "group", "--step", "step",
        "--reward", "format", "--reward", "accuracy", "--out", str(work / "diagnostics"))
    return metrics.parent


@pytest.mark.slow
@pytest.mark.skipif(not CLEAN_VENV, reason="installs the pipeline's packages (torch, transformers, snakemake, ...) "
                                           "into a fresh environment: set DARA_TEST_CLEAN_VENV=1 to run it")
def test_the_pipeline_extra_trains_a_tiny_run_in_a_clean_environment(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # envs/cpu.txt as constraints: its exact versions, torch's CPU build among them
    install = subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"dara[pipeline] @ {wheel.as_uri()}",
                              "-c", str(ROOT / "envs" / "cpu.txt")], capture_output=True, text=True, timeout=3600,
                             env=OUTSIDE)
    assert install.returncode == 0, install.stderr[-4000:]
    work = tmp_path / "work"
    work.mkdir()
    run_dir = train_tiny_run(python, work)
    import pandas as pd

    # two updates: the rollouts of the policy after 0 and 1 of them, and the policy after both
    assert list(pd.read_parquet(run_dir / "metrics.parquet")["step"]) == [0, 1]
    assert (run_dir / "checkpoints" / "step2" / "model.safetensors").is_file()
    assert (work / "diagnostics" / "diagnostics.csv").is_file()
    snakemake = subprocess.run([str(venv / "bin" / "snakemake"), "--version"], capture_output=True, text=True,
                               timeout=300, env=OUTSIDE)
    assert snakemake.returncode == 0 and snakemake.stdout.startswith("9."), snakemake.stderr[-2000:]
