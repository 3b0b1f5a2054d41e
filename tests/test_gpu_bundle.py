"""The GPU bundle (make gpu-bundle, gpu_bundle/, docs/gpu_bundle.md): its pins, its trimming of ray, its size and
its unpack script, checked offline and cheaply; one opt-in test builds the same trimmed layout for this machine's
Python (a download) and runs the paper path's imports, a local Ray and two verl steps from it in an environment that
holds only the GPU image's packages:

    DARA_TEST_GPU_BUNDLE=1 .venv/bin/pytest tests/test_gpu_bundle.py -k image_like -p no:randomly
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
build = load_script("gpu_bundle/build.py")
check_imports = load_script("gpu_bundle/check_imports.py")

# The GPU machine's interpreter and platform, for the requirements' markers.
GPU_MARKERS = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
               "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
GPU_TORCH = Version("2.11.0")
# The packages the environment files pin that the bundle must carry at the same version.
CPU_ENV_FILES = ["cpu.txt", "verl-cpu.txt", "verl-cpu-nodeps.txt", "trl.txt"]


def _installed(name: str):
    try:
        return importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_the_pins_are_the_cpu_environments_where_those_pin_the_package():
    pins = build.read_requirements()
    compared = 0
    for env_file in CPU_ENV_FILES:
        for line in (ROOT / "envs" / env_file).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" not in line:
                continue
            name, version = line.split("==")
            name = build.canonical(name)
            if name in pins:
                compared += 1
                assert pins[name] == version.strip(), f"{name}: envs/gpu-bundle.txt {pins[name]}, {env_file} {version}"
    assert compared >= 15  # verl, TransferQueue, ray, transformers, tokenizers, trl, datasets, jsonschema, ...


def test_read_requirements_refuses_what_is_not_an_exact_pin(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("verl==0.9.1\nray>=2\n")
    with pytest.raises(ValueError, match="not an exact pin"):
        build.read_requirements(path)
    path.write_text("hydra-core==1.3.8\nhydra_core==1.3.8\n")
    with pytest.raises(ValueError, match="pinned twice"):
        build.read_requirements(path)


def test_every_requirement_of_the_bundle_is_in_the_bundle_or_the_image_at_a_version_it_accepts():
    """Read from this environment's records of the same releases: what a bundled package requires on the GPU machine
    (Python 3.12, Linux) is bundled at a version inside the requirement (verl's transformers<5.11, tensordict<=0.10.0,
    ...), provided by the image (torch 2.11.0 inside it), or left out on purpose (build.LEFT_OUT)."""
    pins = build.read_requirements()
    read = 0
    for name, version in pins.items():
        dist = _installed(name)
        if dist is None or dist.version != version:
            continue  # only a record of the very release says what it requires
        read += 1
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(GPU_MARKERS):
                continue
            needed = build.canonical(requirement.name)
            if needed in build.LEFT_OUT:
                continue
            if needed in pins:
                assert requirement.specifier.contains(pins[needed], prereleases=True), (
                    f"{name} {version} requires {text}; envs/gpu-bundle.txt pins {needed}=={pins[needed]}")
            elif needed == "torch":
                assert requirement.specifier.contains(GPU_TORCH), f"{name} {version} requires {text}"
            else:
                assert needed in build.IMAGE_HAS, (
                    f"{name} {version} requires {text}: neither in envs/gpu-bundle.txt nor in the image (IMAGE_HAS)")
    # the packages that decide the rest are read, not skipped
    for name in ("verl", "transferqueue", "ray", "transformers", "trl", "datasets", "tensordict", "jsonschema"):
        assert _installed(name) is not None and _installed(name).version == pins[name], name
    assert read >= 20


@pytest.mark.parametrize("path, trimmed", [
    ("ray/jars/ray_dist.jar", True),
    ("ray/rllib/__init__.py", True),
    ("ray/train", True),
    ("ray/data/dataset.py", True),
    ("ray/serve/api.py", True),
    ("ray/dashboard/client/build/static/js/main.1234.js.map", True),
    ("bin/ray", True),
    ("verl/__pycache__/protocol.cpython-312.pyc", True),
    ("ray/dashboard/client/build/static/js/main.1234.js", False),
    ("ray/dashboard/agent.py", False),
    ("ray/util/placement_group.py", False),
    ("ray/_private/workers/default_worker.py", False),
    ("ray/data_extra.py", False),  # a sibling whose name starts like a trimmed folder stays
    ("ray/_raylet.so", False),
    ("verl/trainer/main_ppo.py", False),
])
def test_trim_rule(path, trimmed):
    assert build.is_trimmed(path) is trimmed


def _module_level_imports(path: Path, module: str) -> set[str]:
    """Modules a file imports when it is imported: module-level statements (class bodies and if blocks included),
    not inside functions, a try block (an import there is guarded) or `if TYPE_CHECKING:`; relative imports
    resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Try)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for branch in child.orelse:
                    visit(ast.Module(body=[branch], type_ignores=[]))
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - child.level + 1])
                    source = f"{base}.{child.module}" if child.module else base
                else:
                    source = child.module
                found.add(source)
                found.update(f"{source}.{alias.name}" for alias in child.names)  # a submodule, when it is one
            else:
                visit(child)

    visit(ast.parse(path.read_text(errors="replace")))
    return found


def _ray_imports_of(package_dir: Path) -> set[str]:
    """Every ray module a package's code names in an import, lazy ones included."""
    names = set()
    for path in package_dir.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names if a.name.split(".")[0] == "ray")
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "ray":
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


# The scripts Ray starts as processes of their own on `ray.init` (workers, dashboard and its agent, runtime-env
# agent, log monitor, autoscaler monitor) and its command line (`python -m ray.scripts.scripts stop`).
RAY_PROCESS_MODULES = ("ray._private.workers.default_worker", "ray.dashboard.agent", "ray.dashboard.dashboard",
                       "ray._private.runtime_env.agent.main", "ray._private.log_monitor",
                       "ray.autoscaler._private.monitor", "ray.scripts.scripts")


def test_nothing_that_verl_dara_or_ray_itself_imports_is_trimmed():
    """Static, on this environment's ray (the same release as the bundle's): start from ray, every ray module that
    verl, TransferQueue, TRL and dara name in an import, and the scripts Ray runs as processes; follow the imports
    that run at import time through ray; none may reach a trimmed path (the opt-in test below starts Ray for real)."""
    ray_dist = _installed("ray")
    assert ray_dist is not None and ray_dist.version == build.read_requirements()["ray"]
    site = Path(ray_dist.locate_file(""))
    roots = {"ray", *RAY_PROCESS_MODULES}
    for package in ("verl", "transfer_queue", "trl"):
        roots |= _ray_imports_of(site / package)
    roots |= _ray_imports_of(ROOT / "src" / "dara")

    def source(module: str) -> Path | None:
        base = site.joinpath(*module.split("."))
        for candidate in (base / "__init__.py", base.with_suffix(".py")):
            if candidate.is_file():
                return candidate
        return None

    seen, todo, reached_from = set(), sorted(roots), {}
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        assert not build.trimmed_module(module), (
            f"{module} is trimmed from the bundle but imported (via {reached_from.get(module, 'a root')})")
        path = source(module)
        if path is None:
            continue  # a name imported from a module, or a compiled module
        parts = module.split(".")
        for n in range(1, len(parts)):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            todo.append(".".join(parts[:n]))
        for imported in _module_level_imports(path, module):
            if imported.split(".")[0] == "ray" and imported not in seen:
                reached_from.setdefault(imported, module)
                todo.append(imported)
    assert {"ray.util.placement_group", "ray.actor", "ray._private.worker"} <= seen  # the walk went through ray


def test_the_trimmed_module_rule_names_packages_above_a_module():
    assert build.trimmed_module("ray.train.v2._internal.state")
    assert build.trimmed_module("ray.data")
    assert not build.trimmed_module("ray.util.state")
    assert not build.trimmed_module("ray.dashboard.modules.train.train_head")  # its import of ray.train is guarded


def test_the_size_check_counts_the_repository_and_refuses_a_bundle_over_the_limit(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    repository_mib = build.repository_bytes() / 2**20
    assert 0.5 < repository_mib < build.SIZE_LIMIT_MIB  # the tracked files are counted, and leave room
    archive = bundle / "deps.tar.xz"
    with open(archive, "wb") as f:  # a sparse file: its size counts, no disk is used
        f.truncate(int((build.SIZE_LIMIT_MIB - repository_mib - 1) * 2**20))
    sizes = build.check_size(bundle)
    assert sizes["total_mib"] == pytest.approx(build.SIZE_LIMIT_MIB - 1, abs=0.1)
    with open(archive, "wb") as f:
        f.truncate(int((build.SIZE_LIMIT_MIB - repository_mib + 1) * 2**20))
    with pytest.raises(SystemExit, match="over the 60 MiB"):
        build.check_size(bundle)


def test_the_repository_leaves_room_for_the_bundle_measured_in_the_docs():
    """The size of the last `make gpu-bundle` (docs/gpu_bundle.md states it) and the repository's files as they are
    now stay under the limit; where a bundle is built here, its own size is checked too."""
    import re

    doc = (ROOT / "docs" / "gpu_bundle.md").read_text()
    measured = float(re.search(r"the archives measure ([0-9.]+) MiB", doc).group(1))
    assert measured + build.repository_bytes() / 2**20 < build.SIZE_LIMIT_MIB
    built = ROOT / "build" / "gpu-bundle"
    if (built / build.MANIFEST).is_file():
        build.check_size(built)


def test_the_dara_record_gives_verl_the_plugin_entry_point(tmp_path):
    record = build.write_dara_record(tmp_path)
    dist = importlib.metadata.PathDistribution(record)
    assert dist.metadata["Name"] == "dara"
    [entry] = dist.entry_points.select(group="verl.plugins")
    assert (entry.name, entry.value) == ("dara", "dara.verl_plugin.entry")


def _fake_bundle(tmp_path: Path) -> tuple[Path, Path]:
    """A repository copy with gpu_bundle/ and a bundle of small archives (no real packages)."""
    repo = tmp_path / "repo"
    (repo / "gpu_bundle").mkdir(parents=True)
    for name in ("activate.sh", "check_imports.py"):
        (repo / "gpu_bundle" / name).write_text((ROOT / "gpu_bundle" / name).read_text())
    content = tmp_path / "content"
    (content / "ray").mkdir(parents=True)
    (content / "ray" / "__init__.py").write_text("")
    (content / "verl").mkdir()
    (content / "verl" / "__init__.py").write_text("VERSION = 'bundle'\n")
    data = tmp_path / "datasrc" / "results" / "verl_cpu" / "data" / "toolcall"
    data.mkdir(parents=True)
    (data / "train.parquet").write_text("from the bundle")
    bundle = repo / "build" / "gpu-bundle"
    bundle.mkdir(parents=True)
    for archive, base, member in (("ray.tar.xz", content, "ray"), ("deps.tar.xz", content, "verl"),
                                  ("data.tar.xz", tmp_path / "datasrc", "results")):
        with tarfile.open(bundle / archive, "w:xz") as tar:
            tar.add(base / member, arcname=member)
    (bundle / "MANIFEST.json").write_text("{}\n")
    return repo, bundle


def _activate(repo: Path, extra: str = "") -> subprocess.CompletedProcess:
    script = (f"set -u; export PYTHONPATH=/image/extra; export DARA_GPU_BUNDLE_CHECK=0; {extra}"
              f"source {repo}/gpu_bundle/activate.sh; status=$?; echo \"status=$status\"; echo \"PP=$PYTHONPATH\"")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_activate_unpacks_once_puts_the_bundle_first_and_keeps_existing_data(tmp_path):
    repo, bundle = _fake_bundle(tmp_path)
    kept = repo / "results" / "verl_cpu" / "data" / "toolcall" / "train.parquet"
    kept.parent.mkdir(parents=True)
    kept.write_text("from a local run")
    result = _activate(repo)
    assert "status=0" in result.stdout, result.stderr
    site = repo / "build" / "gpu-site"
    assert f"PP={repo}/src:{site}:/image/extra" in result.stdout
    assert (site / "verl" / "__init__.py").read_text() == "VERSION = 'bundle'\n"
    assert (site / "ray" / "__init__.py").is_file()
    assert kept.read_text() == "from a local run"  # data unpacks beside, never over, what is there

    # sourced again with the same bundle: not unpacked again, PYTHONPATH not repeated
    (site / "marker").write_text("")
    result = _activate(repo, extra=f"export PYTHONPATH={repo}/src:{site}:/image/extra; ")
    assert "status=0" in result.stdout and "unpacking" not in result.stderr
    assert f"PP={repo}/src:{site}:/image/extra\n" in result.stdout and (site / "marker").exists()

    # a new bundle replaces the unpacked folder
    (bundle / "MANIFEST.json").write_text('{"new": true}\n')
    result = _activate(repo)
    assert "status=0" in result.stdout and "unpacking" in result.stderr and not (site / "marker").exists()


def test_activate_unpacks_with_python_where_the_image_has_no_xz(tmp_path):
    """GNU tar needs the xz program for .tar.xz; on a PATH without it, Python's tarfile unpacks the bundle (an
    executable keeps its mode), and the data still goes beside, never over, what is there."""
    import shutil

    repo, bundle = _fake_bundle(tmp_path)
    raylet = tmp_path / "content" / "ray" / "raylet"
    raylet.write_text("#!/bin/sh\n")
    raylet.chmod(0o755)
    with tarfile.open(bundle / "ray.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "content" / "ray", arcname="ray")
    kept = repo / "results" / "verl_cpu" / "data" / "toolcall" / "train.parquet"
    kept.parent.mkdir(parents=True)
    kept.write_text("from a local run")
    tools = tmp_path / "bin"  # what activate.sh runs, xz left out
    tools.mkdir()
    for tool in ("tar", "cksum", "cat", "rm", "mkdir", "dirname"):
        (tools / tool).symlink_to(shutil.which(tool))
    (tools / "python3").symlink_to(sys.executable)
    script = (f"set -u; export PYTHONPATH=/image/extra DARA_GPU_BUNDLE_CHECK=0; source {repo}/gpu_bundle/activate.sh; "
              "echo \"status=$?\"")
    result = subprocess.run([shutil.which("bash"), "-c", script], capture_output=True, text=True, timeout=60,
                            env={"PATH": str(tools), "HOME": str(tmp_path)})
    assert "status=0" in result.stdout, result.stderr
    site = repo / "build" / "gpu-site"
    assert (site / "verl" / "__init__.py").read_text() == "VERSION = 'bundle'\n"
    assert os.access(site / "ray" / "raylet", os.X_OK)
    assert kept.read_text() == "from a local run"
    assert (site / ".bundle-stamp").is_file()


def test_activate_names_a_missing_bundle(tmp_path):
    repo, bundle = _fake_bundle(tmp_path)
    (bundle / "ray.tar.xz").unlink()
    result = _activate(repo)
    assert "status=1" in result.stdout
    assert "no " + str(bundle / "ray.tar.xz") + "; build it with make gpu-bundle" in result.stderr


def test_check_imports_names_a_missing_module_and_a_version_from_outside_the_site(tmp_path):
    problems = check_imports.import_problems(["json", "a_module_nobody_ships"])
    assert len(problems) == 1 and "a_module_nobody_ships" in problems[0] and "envs/gpu-bundle.txt" in problems[0]
    # pytest is installed in this environment, not in tmp_path: reported as coming from elsewhere
    [problem] = check_imports.version_problems(tmp_path, {"pytest": importlib.metadata.version("pytest")})
    assert "not the bundle's" in problem


# ---------------------------------------------------------------------------------------------------------------
# Opt-in: the trimmed layout for this machine's Python, in an environment with the GPU image's packages only.

needs_opt_in = pytest.mark.skipif(os.environ.get("DARA_TEST_GPU_BUNDLE") != "1",
                                  reason="downloads the bundle's wheels for this Python and starts Ray: "
                                         "set DARA_TEST_GPU_BUNDLE=1")


def image_like_environment(dest: Path) -> Path:
    """A venv whose site-packages holds, as links into this environment, only the distributions of the GPU image
    (build.IMAGE_HAS, minus transformers and tokenizers, which the bundle brings); its Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    [site] = dest.glob("lib/python*/site-packages")
    for name in sorted(build.IMAGE_HAS - {"transformers", "tokenizers"}):
        dist = _installed(name)
        if dist is None:
            continue  # triton: not in a CPU torch's environment
        base = Path(dist.locate_file(""))
        for top in sorted({Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}):
            if top != "__pycache__" and (base / top).exists() and not (site / top).exists():
                (site / top).symlink_to(base / top)
    return dest / "bin" / "python"


@pytest.fixture(scope="module")
def image_like(tmp_path_factory):
    site = ROOT / "build" / f"gpu-bundle-cp{sys.version_info.major}{sys.version_info.minor}" / "site"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    subprocess.run([sys.executable, str(ROOT / "gpu_bundle" / "build.py"), "--python-version", version,
                    "--site-only", str(site)], check=True, timeout=1200)
    python = image_like_environment(tmp_path_factory.mktemp("image_like") / "venv")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(site)])}
    return python, site, env


@needs_opt_in
def test_image_like_environment_imports_the_paper_path_and_runs_ray_from_the_trimmed_bundle(image_like):
    python, site, env = image_like
    assert subprocess.run([str(python), "-c", "import ray"], capture_output=True).returncode != 0  # no ray but ours
    result = subprocess.run([str(python), str(ROOT / "gpu_bundle" / "check_imports.py"), "--site", str(site),
                             "--ray"], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-6000:]
    assert '"problems": []' in result.stdout


@needs_opt_in
def test_image_like_environment_trains_two_verl_steps_from_the_trimmed_bundle(image_like, tmp_path):
    """verl's loop on CPU (tests/verl_cpu_setup.py's 2-step DARA-Asym run), every process on the image-like Python
    with the bundle: what the runtime imports, not only what the entry modules import."""
    from verl_cpu_setup import RUN_DIR, two_step_experiment

    from dara.experiments import load_experiment
    from dara.runs import find_run_by_dir

    python, _, env = image_like
    experiment = two_step_experiment(tmp_path)
    run = find_run_by_dir(load_experiment(experiment), RUN_DIR)
    result = subprocess.run([str(python), "-m", "dara.verl_backend.launch", "train", "--run", run.to_json()],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    import pandas as pd

    assert pd.read_parquet(tmp_path / RUN_DIR / "metrics.parquet")["step"].tolist() == [0, 1]
