"""The package as a verl or TRL user gets it: `pip install dara[verl]` or `dara[trl]` from a wheel, outside any
checkout. Its metadata declares what the library needs (ranges that the study's pinned environments satisfy), and
the installed wheel works from a folder that is not the repository: the estimators, the experiment schema,
experiment files by path, `dara diagnose`, verl's entry point; a scale name gets an error that says why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
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
], ids=["core-cpu", "trl-cpu", "verl-cpu", "verl-gpu"])
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
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel built from this checkout, its dependencies taken from the test
    environment's site-packages (a .pth line: that folder's own .pth files, the editable install among them, are
    not read), so `dara` can come from the wheel only. Returns the environment's python."""
    scratch = tmp_path_factory.mktemp("wheel")
    source = scratch / "source"  # a copy, so that building writes no build/ or egg-info into the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = scratch / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--wheel-dir", str(wheels), str(source)], check=True, capture_output=True, timeout=300)
    [wheel] = wheels.glob("dara-*.whl")
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
