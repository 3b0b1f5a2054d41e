"""Build the GPU bundle: what a GPU machine without network needs beside its image to run dara's paper path
(docs/gpu_bundle.md).

    .venv/bin/python gpu_bundle/build.py                      # make gpu-bundle: build/gpu-bundle/*.tar.xz
    .venv/bin/python gpu_bundle/build.py --python-version 3.11 --site-only build/gpu-bundle-cp311/site

The packages of envs/gpu-bundle.txt are downloaded from PyPI as wheels for CPython ``--python-version`` on manylinux
x86-64 (one that has no wheel, `BUILD_LOCALLY`, is built here: pure Python), installed side by side into one
site-packages folder (``pip install --target``, no dependencies, no bytecode), ray is trimmed (`RAY_TRIMMED`), a
``dara`` distribution record is added so that ``import verl`` finds dara's ``verl.plugins`` entry point without an
install, and everything is packed as tar.xz archives: ``ray.tar.xz`` and ``deps.tar.xz`` (the rest), plus
``data.tar.xz`` (the verl_cpu scale's tiny tool-calling warm start and verl data, where they exist) and
``MANIFEST.json``. The machine unpacks them with ``source gpu_bundle/activate.sh``.

The bundle travels with the repository's files to the GPU machine, which takes at most 64 MiB beside them: the
archives and the repository together must stay under `SIZE_LIMIT_MIB` (checked at the end of every build).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "envs" / "gpu-bundle.txt"
SIZE_LIMIT_MIB = 60

# Distributions that the GPU image provides (torch 2.11.0+cu130, transformers 5.17.0, tokenizers 0.23.2, accelerate,
# safetensors, numpy, pandas, pyarrow, pytest, and what they require as resolved for Python 3.12), by canonical name.
# Not pydantic (nor pydantic-core, annotated-types, typing-inspection, tzdata): a resolution with today's typer
# pulls them in, but the image's package list, as read on such a machine, has none of them.
# transformers and tokenizers are in the bundle all the same: verl 0.9.1 needs transformers>=5.5.3,<5.11.
IMAGE_HAS = frozenset({
    "torch", "triton", "transformers", "tokenizers", "accelerate", "safetensors", "numpy", "pandas", "pyarrow",
    "pytest", "annotated-doc", "anyio", "certifi", "click", "filelock", "fsspec", "h11", "hf-xet", "httpcore", "httpx",
    "huggingface-hub", "idna", "iniconfig", "jinja2", "markdown-it-py", "markupsafe", "mdurl", "mpmath", "networkx",
    "packaging", "pluggy", "psutil", "pygments", "python-dateutil", "pyyaml", "regex", "rich", "setuptools",
    "shellingham", "sympy", "tqdm", "typer", "typing-extensions",
})
# verl's and TransferQueue's declared requirements that the bundle leaves out, as the CPU test environment (which runs
# verl's loop end to end) does: wandb (imported only with the wandb logger), tensorboard (its logger), pylatexenc
# (verl's prime_math scorer), pybind11 (a build tool), prometheus-client (TransferQueue's metrics exporter, imported
# only when its metrics are switched on). Extras are not followed either (ray[default]: the dashboard's exporters,
# which Ray loads only when present).
LEFT_OUT = frozenset({"wandb", "tensorboard", "pybind11", "pylatexenc", "prometheus-client"})
# No wheel on PyPI (an sdist only): built here with `pip wheel`; pure Python, so the wheel fits every target.
BUILD_LOCALLY = frozenset({"antlr4-python3-runtime"})

# What of ray 2.60.0 the paper path never imports (Java workers; the RLlib, Tune, Train, Serve, LLM and Data
# libraries; the dashboard web client's source maps): 56 MiB of its 193 MiB unpacked. Paths inside site-packages.
RAY_TRIMMED = ("ray/jars", "ray/rllib", "ray/tune", "ray/train", "ray/serve", "ray/llm", "ray/data")
RAY_TRIMMED_SUFFIX = (("ray/dashboard/", ".map"),)

MANYLINUX = [f"manylinux_2_{minor}_x86_64" for minor in (17, 24, 26, 27, 28)] + ["manylinux2014_x86_64"]
# Not part of the bundle: console scripts (their shebangs name this machine's Python) and bytecode of this machine.
NOT_PACKED_TOP = ("bin",)

ARCHIVE_DEPS = "deps.tar.xz"
ARCHIVE_RAY = "ray.tar.xz"
ARCHIVE_DATA = "data.tar.xz"
MANIFEST = "MANIFEST.json"
# The verl_cpu scale's tool-calling warm start and verl data (the paths `make verl-cpu` writes), relative to ROOT.
DATA_PATHS = ("results/verl_cpu/policies/toolcall/warm_start0", "results/verl_cpu/data/toolcall")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_requirements(path: Path = REQUIREMENTS) -> dict[str, str]:
    """``{canonical name: version}`` of a file of exact pins (``name==version`` lines, ``#`` comments)."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if not match:
            raise ValueError(f"{path}:{number}: {raw!r} is not an exact pin (name==version)")
        name = canonical(match.group(1))
        if name in pins:
            raise ValueError(f"{path}:{number}: {name} is pinned twice")
        pins[name] = match.group(2)
    return pins


def is_trimmed(relative: str) -> bool:
    """Whether a path inside site-packages (``/``-separated) is left out of the bundle."""
    parts = relative.split("/")
    if parts[0] in NOT_PACKED_TOP or "__pycache__" in parts:
        return True
    if any(relative == top or relative.startswith(top + "/") for top in RAY_TRIMMED):
        return True
    return any(relative.startswith(prefix) and relative.endswith(suffix) for prefix, suffix in RAY_TRIMMED_SUFFIX)


def trimmed_module(module: str) -> bool:
    """Whether the trimming removes a dotted module (``ray.util.placement_group``) or a package above it."""
    parts = module.split(".")
    paths = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    return any(is_trimmed(path) or is_trimmed(path + ".py") for path in paths)


def pip_target_options(python_version: str) -> list[str]:
    """pip options selecting wheels for CPython ``python_version`` on manylinux x86-64 (any pure-Python wheel too)."""
    abi = "cp" + python_version.replace(".", "")
    options = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
               "--abi", abi, "--abi", "abi3", "--abi", "none"]
    for platform in MANYLINUX:
        options += ["--platform", platform]
    return options


def run(command: list[str], **kwargs) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


def download(pins: dict[str, str], wheels: Path, python_version: str) -> None:
    """Every pinned wheel into ``wheels`` (pip skips the ones already there)."""
    wheels.mkdir(parents=True, exist_ok=True)
    binary = [f"{name}=={version}" for name, version in pins.items() if name not in BUILD_LOCALLY]
    local = [f"{name}=={version}" for name, version in pins.items() if name in BUILD_LOCALLY]
    pip = [sys.executable, "-m", "pip"]
    run(pip + ["download", "--quiet", "--no-deps", "--dest", str(wheels)] + pip_target_options(python_version)
        + binary)
    if local:
        run(pip + ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels)] + local)


def install(pins: dict[str, str], wheels: Path, site: Path, python_version: str) -> None:
    """The pinned wheels of ``wheels`` side by side into ``site`` (emptied first), as ``pip install --target``."""
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-compile",
         "--find-links", str(wheels), "--target", str(site)] + pip_target_options(python_version)
        + [f"{name}=={version}" for name, version in pins.items()])


def trim(site: Path) -> int:
    """Remove what `is_trimmed` names from ``site``; the bytes removed."""
    removed = 0
    for path in sorted(site.rglob("*"), reverse=True):  # children before their folders
        relative = path.relative_to(site).as_posix()
        if not is_trimmed(relative) or not (path.exists() or path.is_symlink()):
            continue
        if path.is_dir() and not path.is_symlink():
            removed += sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
            shutil.rmtree(path)
        else:
            removed += path.lstat().st_size
            path.unlink()
    return removed


def write_dara_record(site: Path, pyproject: Path = ROOT / "pyproject.toml") -> Path:
    """A ``dara`` distribution record (METADATA and entry_points.txt, from pyproject.toml) in ``site``: what
    ``pip install -e .`` would write for ``importlib.metadata``, so that ``import verl`` loads dara's plugin while
    the code itself comes from the checkout's ``src`` on PYTHONPATH."""
    project = tomllib.loads(pyproject.read_text())["project"]
    record = site / f"{project['name']}-{project['version']}.dist-info"
    record.mkdir(parents=True, exist_ok=True)
    (record / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, entries in project.get("entry-points", {}).items():
        lines.append(f"[{group}]")
        lines += [f"{key} = {value}" for key, value in entries.items()]
        lines.append("")
    (record / "entry_points.txt").write_text("\n".join(lines))
    (record / "INSTALLER").write_text("gpu_bundle/build.py\n")
    return record


def tar_xz(out: Path, base: Path, members: list[str]) -> None:
    """``members`` (paths relative to ``base``) as one tar.xz, in name order with neutral owners and times, so that
    the same files give the same archive."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    env = {**os.environ, "XZ_OPT": "-9 -T0"}
    run(["tar", "--create", "--xz", "--file", str(tmp), "--directory", str(base), "--sort=name", "--mtime=@0",
         "--owner=0", "--group=0", "--numeric-owner", "--"] + members, env=env)
    tmp.replace(out)


def repository_bytes(root: Path = ROOT) -> int:
    """Bytes of what reaches the GPU machine of the repository: its tracked files and the untracked ones git does not
    ignore (the ignored build folders travel only when named)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.decode().split("\0")
    total = 0
    for name in filter(None, listed):
        path = root / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def bundle_bytes(bundle: Path) -> int:
    return sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())


def check_size(bundle: Path, root: Path = ROOT, limit_mib: float = SIZE_LIMIT_MIB) -> dict[str, float]:
    """The bundle's and the repository's sizes in MiB; raises if together they reach ``limit_mib``."""
    sizes = {"bundle_mib": bundle_bytes(bundle) / 2**20, "repository_mib": repository_bytes(root) / 2**20}
    sizes["total_mib"] = sizes["bundle_mib"] + sizes["repository_mib"]
    if sizes["total_mib"] >= limit_mib:
        raise SystemExit(f"the GPU bundle ({sizes['bundle_mib']:.1f} MiB in {bundle}) and the repository "
                         f"({sizes['repository_mib']:.1f} MiB) come to {sizes['total_mib']:.1f} MiB, over the "
                         f"{limit_mib} MiB that reach the GPU machine: trim the bundle (RAY_TRIMMED) or the repository")
    return sizes


def build_site(python_version: str, work: Path, site: Path, pins: dict[str, str]) -> int:
    """Download, install and trim the pinned packages into ``site``; the bytes trimmed."""
    wheels = work / f"wheels-cp{python_version.replace('.', '')}"
    download(pins, wheels, python_version)
    install(pins, wheels, site, python_version)
    removed = trim(site)
    write_dara_record(site)
    return removed


def pack(site: Path, out: Path, pins: dict[str, str], python_version: str, trimmed_bytes: int,
         with_data: bool) -> dict:
    """The archives and MANIFEST.json in ``out`` (emptied first)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    entries = sorted(p.name for p in site.iterdir())
    ray = [name for name in entries if name == "ray" or (name.startswith("ray-") and name.endswith(".dist-info"))]
    tar_xz(out / ARCHIVE_RAY, site, ray)
    tar_xz(out / ARCHIVE_DEPS, site, [name for name in entries if name not in ray])
    data = [path for path in DATA_PATHS if (ROOT / path).is_dir()]
    if with_data:
        missing = sorted(set(DATA_PATHS) - set(data))
        if missing:
            raise SystemExit(f"no {', '.join(missing)}: build the verl_cpu scale's tool-calling data first "
                             "(make gpu-bundle does: snakemake results/verl_cpu/data/toolcall/train.parquet "
                             "--config scale=verl_cpu)")
        tar_xz(out / ARCHIVE_DATA, ROOT, data)
    manifest = {
        "python_version": python_version,
        "packages": pins,
        "ray_trimmed": list(RAY_TRIMMED) + [f"{p}**/*{s}" for p, s in RAY_TRIMMED_SUFFIX],
        "ray_trimmed_mib": round(trimmed_bytes / 2**20, 1),
        "data": data if with_data else [],
        "archives": {p.name: p.stat().st_size for p in sorted(out.glob("*.tar.xz"))},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "gpu-bundle-work",
                        help="downloaded wheels and the unpacked site-packages (not carried to the GPU machine)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-bundle",
                        help="the archives: the folder to carry to the GPU machine")
    parser.add_argument("--site-only", type=Path, metavar="DIR",
                        help="only build the trimmed site-packages folder DIR (no archives, no size check): the "
                             "layout tests/test_gpu_bundle.py imports from on this machine's Python")
    parser.add_argument("--no-data", action="store_true", help="leave the warm start and verl data out")
    args = parser.parse_args(argv)
    pins = read_requirements()
    if args.site_only:
        build_site(args.python_version, args.work, args.site_only, pins)
        print(f"trimmed site-packages for Python {args.python_version} in {args.site_only}")
        return
    site = args.work / f"site-cp{args.python_version.replace('.', '')}"
    removed = build_site(args.python_version, args.work, site, pins)
    manifest = pack(site, args.out, pins, args.python_version, removed, with_data=not args.no_data)
    sizes = check_size(args.out)
    for name, size in manifest["archives"].items():
        print(f"{name}: {size / 2**20:.1f} MiB")
    print(f"GPU bundle {args.out}: {sizes['bundle_mib']:.1f} MiB; with the repository's "
          f"{sizes['repository_mib']:.1f} MiB: {sizes['total_mib']:.1f} MiB (limit {SIZE_LIMIT_MIB} MiB; "
          f"ray trimmed by {manifest['ray_trimmed_mib']} MiB)")


if __name__ == "__main__":
    main()
