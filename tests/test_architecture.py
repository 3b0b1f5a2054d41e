"""The layers of docs/architecture.md, enforced on the source: what each package of src/dara may import.

Imports are read from the syntax tree of every module (imports inside functions count too), so a lazy import
cannot slip a layer.
"""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# package -> the dara packages it may import (besides itself). The order is the layering of docs/architecture.md.
ALLOWED = {
    "dara.methods": set(),
    "dara.io": set(),
    "dara.advantages": {"dara.methods"},
    "dara.advantages_loop": set(),  # the independent check of dara.advantages: it shares nothing with it
    "dara.rewards": set(),
    "dara.tasks": {"dara.rewards"},
    "dara.experiments": {"dara.devices", "dara.methods", "dara.tasks"},
    "dara.runs": {"dara.experiments"},
    # the CPU kernel pin (dara.kernels: the environment every job runs under, the process's dispatch and CPU)
    "dara.kernels": set(),
    "dara.provenance": {"dara.io", "dara.kernels"},
    # the device setting of every trainer and of the verl launcher (dara.devices imports nothing of dara)
    "dara.devices": set(),
    # dara.kernels: the trainer's resume state records the dispatch it was written under
    "dara.tiny": {"dara.advantages", "dara.devices", "dara.experiments", "dara.io", "dara.kernels", "dara.methods",
                  "dara.provenance", "dara.rewards", "dara.runs", "dara.tasks"},
    # the density diagnostics of any rollout table (`dara diagnose`) and the trainers' monitor modes
    "dara.diagnose": {"dara.advantages", "dara.io", "dara.methods"},
    # the `dara` command: it imports a command's module by name when that command runs
    "dara.__main__": set(),
    # the calibration pilots: short tiny runs and the pipeline's own held-out evaluation of them, their crossing
    # steps counted and summarised as the analysis does (dara.analysis.crossing)
    "dara.pilot": {"dara.advantages", "dara.analysis", "dara.evaluation", "dara.experiments", "dara.io", "dara.runs",
                   "dara.tasks", "dara.tiny"},
    "dara.trl": {"dara.advantages", "dara.devices", "dara.diagnose", "dara.experiments", "dara.io", "dara.methods",
                 "dara.provenance", "dara.rewards", "dara.runs", "dara.tasks", "dara.tiny"},
    # inside verl's processes: the algorithm and the rewards, nothing of the launcher, the workflow or the analysis
    "dara.verl_plugin": {"dara", "dara.advantages", "dara.devices", "dara.diagnose", "dara.methods", "dara.rewards",
                         "dara.tasks"},
    "dara.verl_backend": {"dara.advantages", "dara.devices", "dara.experiments", "dara.io", "dara.methods",
                          "dara.provenance", "dara.runs", "dara.tasks", "dara.verl_plugin"},
    "dara.evaluation": {"dara.experiments", "dara.io", "dara.kernels", "dara.provenance", "dara.rewards", "dara.runs",
                        "dara.tasks", "dara.tiny"},
    # dara.provenance: the ledger reads the code a report names as the reports' writer labels it
    "dara.analysis": {"dara.advantages", "dara.experiments", "dara.io", "dara.methods", "dara.provenance",
                      "dara.runs"},
}


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = defaultdict(set)
    for path in (SRC / "dara").rglob("*.py"):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found[module].update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found[module].add(node.module)
    return found


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


IMPORTS = _imports()


def test_every_package_is_placed_in_a_layer():
    packages = {_package(module) for module in IMPORTS} - {"dara"}
    assert packages == set(ALLOWED), "add the new package to ALLOWED and to docs/architecture.md"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    used = {_package(target) for module, targets in IMPORTS.items() if _package(module) == package
            for target in targets if target == "dara" or target.startswith("dara.")}
    assert used - {package} <= ALLOWED[package], sorted(used - {package} - ALLOWED[package])


def test_the_library_never_imports_snakemake():
    offenders = sorted(module for module, targets in IMPORTS.items()
                       if any(target.split(".")[0] == "snakemake" for target in targets))
    assert not offenders


def test_evaluation_and_analysis_never_reach_the_trainers_or_verl():
    forbidden = ("dara.verl_plugin", "dara.verl_backend", "dara.trl", "dara.tiny.trainer", "verl")
    for module, targets in IMPORTS.items():
        if module.startswith(("dara.evaluation", "dara.analysis")):
            assert not [t for t in targets if t.startswith(forbidden)], module


def test_the_checker_sees_lazy_imports():
    # dara.verl_backend.launch imports the CPU backend inside a function: the rules must see it
    assert "dara.verl_plugin.cpu" in IMPORTS["dara.verl_backend.launch"]
