"""The CPU kernel dispatch every job runs under: one pin, so that a tiny run writes the same bytes on every CPU that
runs it pinned (checked natively on an AMD CPU with AVX-512 and emulated on an Intel CPU with AVX2: below).

PyTorch's CPU build picks its float kernels from the CPU it runs on, in two libraries the tiny policy goes through
(its fp32 linear layers, attention, softmax, norms and optimiser: MKL's SGEMM and ATen's vectorised kernels; oneDNN
runs none of them). Each choice rounds differently, and 600-1,600 supervised steps turn a last-bit difference into
another warm start (docs/tiny_scale.md, "Machine dependence"). The pin fixes each choice by environment variable,
which the libraries read once, when torch (numpy) is imported (setting them later does nothing):

``ATEN_CPU_CAPABILITY=avx2``
    ATen's kernels (log_softmax, SDPA's CPU flash attention, reductions, elementwise math) exist compiled for
    ``default`` (SSE2), ``avx2`` and ``avx512``, and torch takes the widest the CPU has. AVX2 is the widest that
    every x86-64 CPU of the last decade has (every AVX-512 CPU has it too), and its kernels are the same code on Intel
    and AMD. On the AVX-512 AMD CPU type it costs nothing (the trainer's step 0.97x as long).
``MKL_CBWR=COMPATIBLE``
    MKL's code branch (torch's GEMMs; its vector math, which ATen's ``exp``, ``log``, ``sqrt``, ``cos`` and others
    of a float tensor call). Unpinned, MKL dispatches by vendor and ISA: AVX-512 kernels on an AVX-512 Intel CPU,
    one AMD path on any AMD CPU. ``COMPATIBLE`` (SSE2) is MKL's one branch documented to give the same results on
    Intel and non-Intel CPUs; a named branch such as ``AVX2`` is honoured on Intel only (on AMD MKL silently takes
    its automatic branch, `_mkl_branch` reads ``AUTO``). Of the functions tested, one escapes it: the vector square
    root apparently starts from the approximate reciprocal square root (rsqrtps), whose tables differ between Intel
    and AMD, so ``torch.sqrt`` of a CPU float tensor is not correctly rounded (about 15 % of float32 values off by
    an ulp) and can give other bytes on another vendor's CPU, pin or not (it does under emulation, below). Nothing a
    tiny job computes calls it: AdamW is fused (its kernel takes the exact square root) and the estimators use
    `dara.advantages.exact_sqrt`. MKL's reproducible mode also fixes its cache blocking and reductions; with one
    thread (the jobs' ``OMP_NUM_THREADS=1``) ``,STRICT`` gave the same bytes. This was the pin's whole cost: SSE2
    GEMMs made the trainer's step 1.5x as long on the AVX-512 AMD CPU type (warm starts alike), until the policies'
    linear layers moved to OpenBLAS (below); attention's products and everything else MKL computes still take this
    branch.
``ONEDNN_MAX_CPU_ISA=AVX2``
    oneDNN picks its JIT kernels (AVX-512, AMX) by CPU too. No op of the tiny policy runs in oneDNN
    (``ONEDNN_VERBOSE=1`` shows no primitive), so this only caps what a future op (a convolution, a reduced-precision
    matmul) would take.
``OPENBLAS_CORETYPE=Haswell``, ``OPENBLAS_NUM_THREADS=1``
    numpy's OpenBLAS picks its kernels by CPU as well (``SkylakeX`` on an AVX-512 CPU, ``Haswell`` or ``Zen`` on AVX2
    ones) and threads by core count. Forced to the Haswell kernels (AVX2 and FMA, which every CPU with AVX2 of the last
    decade has) and one thread, its SGEMM is the same code with the same blocking everywhere. It multiplies the
    linear layers of a policy made with ``warm_start.matmul: openblas`` (`dara.tiny.gemm`: two to three times MKL's
    pinned SSE2 rate), and any matrix product numpy computes in an analysis. OpenBLAS reads both when numpy is
    imported.

``NPY_DISABLE_CPU_FEATURES=X86_V4,AVX512_ICL,...`` (`NUMPY_AVX512_TARGETS`)
    numpy's own ufuncs pick SIMD loops by CPU as well, and some round differently at each width: float64 ``exp``,
    ``log`` and ``power`` (and float32 ``exp``, ``log``, ``tanh``, ``sin`` without AVX2) gave other bytes with its
    AVX-512 loops than with its AVX2 ones on 10^6 values (measured, numpy 2.4.6). No training path calls them; the
    analysis's libraries (pandas, scipy, lifelines) may. Every table and figure's data of the 19a6689 snapshot came
    out byte for byte the same with numpy capped at AVX2, so the cap changes no result of today's pipeline and
    guards the ones an analysis may add. numpy reads it once, when imported. Like every variable here it is a param
    of each torch job, so adding it reran them all (the analysis rules carry no pin: they rerun with their inputs).

Measured on the AVX-512 AMD CPU type (Zen 4), with MKL's vendor check answered "Intel" (a preloaded
``mkl_serv_intel_cpu_true``), which reproduced the Intel Xeon's unpinned step-0 rates in every printed digit: under
the pin the three warm starts (toolcall, math_length, act_critic) were byte-identical either way; unpinned they
differ. ATen's AVX2 with MKL's AMD path on Zen 4 reproduced the AVX2 AMD CPU type's (Zen 3) step-0 table. Step-0
rates reported from an Intel Xeon (AVX-512, AMX) under these three variables (toolcall correctness -1.272,
act_critic accuracy 0.047 at density 0.34) differed from the pinned ones here (-1.296, 0.062 at 0.41; math_length
equal). A plausible cause (unconfirmed on a Xeon) was found under emulation: QEMU's user mode with its Haswell model
(an Intel CPU with AVX2, no AVX-512) runs every library's vendor and ISA dispatch as on such a CPU and computes
rsqrtps to full precision, as no CPU does. There a pinned warm start gave other weights than natively, and of the
operations the tiny policy uses only ``torch.sqrt`` (AdamW's, then unfused) differed. With AdamW fused and the
estimators' square root exact, a warm start and runs of the draw write the same bytes natively and emulated
(tests/test_kernels.py; ``make check-emulated-cpu`` reruns the draw's own jobs, docs/results/emulated_cpu.md). A
real Intel CPU has not run the pinned pipeline since.

``DARA_PIN_KERNELS=1`` rides with the pin: it marks a process that must be pinned. The workflow exports the pin
and the marker in front of every job (``workflow/rules/common.smk``'s ``shell.prefix``, from `shell_exports`), and
the Makefile targets that run torch outside Snakemake with ``env $(python -m dara.kernels env)``. A marked process
checks itself (`enforce_pin`) before it writes a run's provenance or trains a warm start; unmarked (a test, a
command typed by hand) it records its dispatch and goes on.

``python -m dara.kernels env`` prints the assignments (for ``env``), ``show`` this process's record (`machine_record`),
``check`` exits non-zero, naming the variable, when this process is not pinned.

Importing this module imports nothing heavy (the workflow imports it); torch is read only when a function asks.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# numpy's own AVX-512 dispatch targets, by the names of both numpy lines the project installs: 2.x groups them
# (X86_V4 and two later ones), 1.26 (the BFCL environment's) names each. A name a numpy does not dispatch is ignored
# there, with an ImportWarning (hidden by Python's default filters); a target this CPU lacks is ignored silently.
NUMPY_AVX512_TARGETS = ("X86_V4", "AVX512_ICL", "AVX512_SPR", "AVX512F", "AVX512CD", "AVX512_KNL", "AVX512_KNM",
                        "AVX512_SKX", "AVX512_CLX", "AVX512_CNL")
# The pin: variable -> value, each set before torch is imported (the module docstring says why each).
PIN: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_NUM_THREADS": "1",
    "NPY_DISABLE_CPU_FEATURES": ",".join(NUMPY_AVX512_TARGETS),
}
# Set (to "1") where a process must run pinned: every workflow job, the Makefile's torch targets.
MARKER = "DARA_PIN_KERNELS"
# What torch reports for the pinned ATen capability (torch.backends.cpu.get_cpu_capability()).
PINNED_CAPABILITY = "AVX2"
# MKL's CNR branch constants (mkl.h, MKL_CBWR_*), as its mkl_cbwr_get(MKL_CBWR_BRANCH) returns them.
MKL_BRANCHES = {0: "DISABLED", 1: "OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2",
                9: "AVX", 10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")


class KernelPinError(RuntimeError):
    """A process that must run pinned (`MARKER`) is not: a variable missing or wrong, or torch's dispatch not the
    pin's."""


def env_assignments() -> list[str]:
    """``NAME=value`` of the pin and its marker, in `PIN`'s order (for ``env`` in a Makefile recipe)."""
    return [f"{name}={value}" for name, value in {**PIN, MARKER: "1"}.items()]


def shell_exports() -> str:
    """The shell command that pins every later command of a shell (the workflow's ``shell.prefix``): ``export
    ATEN_CPU_CAPABILITY=avx2 ... DARA_PIN_KERNELS=1; ``."""
    return "export " + " ".join(shlex.quote(assignment) for assignment in env_assignments()) + "; "


def pinned_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``environ`` (default: this process's) with the pin and its marker set, for a subprocess."""
    return {**(os.environ if environ is None else environ), **PIN, MARKER: "1"}


def _mkl_branch() -> str | None:
    """The CNR branch MKL runs in this process (its ``mkl_cbwr_get``, through torch's statically linked MKL):
    ``COMPATIBLE`` under the pin; ``OFF`` unpinned; ``AUTO`` where a named branch is not honoured (``AVX2`` on
    AMD). None where it cannot be read (no MKL, another build)."""
    try:
        import ctypes

        import torch

        if not torch.backends.mkl.is_available():
            return None
        library = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = library.mkl_serv_cbwr_get
        get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
        value = get(1)  # MKL_CBWR_BRANCH
    except (OSError, AttributeError, ImportError):
        return None
    return MKL_BRANCHES.get(value & 0xFFFF, str(value)) + (",STRICT" if value & 0x10000 else "")


def _openblas_core() -> str | None:
    """The core type whose kernels numpy's OpenBLAS runs in this process (``Haswell`` under the pin; unpinned what the
    CPU picks, e.g. ``SkylakeX``), read through its ``get_corename``; None where it cannot be read (no numpy, a
    numpy linked to another BLAS)."""
    try:
        import ctypes
        import glob

        import numpy

        # numpy's wheels keep their OpenBLAS beside the package, in numpy.libs
        folder = Path(numpy.__file__).parent.parent / "numpy.libs"
        found = sorted(glob.glob(str(folder / "*openblas*.so*")))
        library = ctypes.CDLL(found[0]) if found else None
    except (ImportError, OSError):
        return None
    for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                 "openblas_get_corename"):
        function = getattr(library, name, None)
        if function is not None:
            function.restype = ctypes.c_char_p
            return function().decode()
    return None


def _numpy_simd() -> list[str] | None:
    """numpy's own dispatch targets (its ufuncs' SIMD loops) active in this process, e.g. ``['X86_V3']`` under the
    pin; None without numpy."""
    try:
        import numpy  # noqa: F401 - the module below is numpy's own, imported with it
    except ImportError:
        return None
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # numpy 1.x
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return [target for target in __cpu_dispatch__ if __cpu_features__.get(target)]


def _numpy_version() -> str | None:
    """numpy's version, which fixes the OpenBLAS build its wheel carries (None without numpy)."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy.__version__


def _build_info() -> dict[str, str | None]:
    """Torch's MKL and oneDNN versions, read from ``torch.__config__.show()``."""
    import re

    import torch

    shown = torch.__config__.show()
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", shown)
    onednn = re.search(r"(?:MKL-DNN|oneDNN) v(\S+)", shown)
    return {"mkl": mkl and mkl.group(1), "onednn": onednn and onednn.group(1)}


def dispatch() -> dict[str, Any]:
    """What this process's torch actually dispatches to: ATen's CPU capability, MKL's branch, whether oneDNN is on,
    the pin's variables as set (None: unset), the marker, the thread count, and torch's build (only the variables
    where torch is not installed)."""
    variables = {"variables": {name: os.environ.get(name) for name in PIN}, "marker": os.environ.get(MARKER)}
    try:
        import torch
    except ImportError:
        return {**variables, "torch": None}
    return {
        "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_cbwr_branch": _mkl_branch(),
        "openblas_core": _openblas_core(),
        "numpy": _numpy_version(),
        "numpy_simd": _numpy_simd(),
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
        **variables,
        "pinned": is_pinned(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **_build_info(),
    }


def cpu(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> dict[str, Any]:
    """The CPU this process runs on: vendor, model name, family and model, logical CPUs, and the vector flags that
    decide the unpinned dispatch (`CPU_FLAGS`: true where the CPU has them). Empty fields outside Linux."""
    first: dict[str, str] = {}
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if not line.strip():
                break  # the first processor's block
            key, _, value = line.partition(":")
            first[key.strip()] = value.strip()
    except OSError:
        pass
    flags = set(first.get("flags", "").split())
    return {"vendor": first.get("vendor_id"), "model_name": first.get("model name"),
            "family": first.get("cpu family"), "model": first.get("model"), "logical_cpus": os.cpu_count(),
            "flags": {flag: flag in flags for flag in CPU_FLAGS}}


def machine_record() -> dict[str, Any]:
    """The record of where a process computed: `dispatch` and `cpu` (a run's ``machine.json``, a warm start's
    ``warmstart.json``). Checks the pin first where the process is marked (`enforce_pin`)."""
    enforce_pin()
    return {"dispatch": dispatch(), "cpu": cpu()}


def pin_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """What keeps ``environ`` (default: this process's) from the pin, one sentence a variable (empty: pinned). For
    this process, once torch (numpy) is imported, also where torch's dispatch (numpy's OpenBLAS kernels) is not the
    pin's (a variable set after the library started, or a CPU without AVX2)."""
    own = environ is None
    environ = os.environ if own else environ
    problems = []
    for name, value in PIN.items():
        found = environ.get(name)
        if found is None:
            problems.append(f"{name} is not set (the pin needs {name}={value})")
        elif found != value:
            problems.append(f"{name}={found} (the pin needs {name}={value})")
    if own:
        # the pinned kernels (ATen's AVX2, OpenBLAS's Haswell) need AVX2 and FMA: without them OpenBLAS would stop
        # the process at its first product with an illegal instruction, not with a message
        machine = cpu()
        missing = [flag for flag in ("avx2", "fma") if not machine["flags"].get(flag)]
        if missing and machine["vendor"] is not None:
            problems.append(f"this CPU has no {' or '.join(missing)}, which the pinned kernels need (ATen's AVX2, "
                            "OpenBLAS's Haswell)")
    variables_pinned = not problems
    if own and variables_pinned and "torch" in sys.modules:
        import torch

        capability = torch.backends.cpu.get_cpu_capability()
        if capability != PINNED_CAPABILITY:
            problems.append(f"ATEN_CPU_CAPABILITY={PIN['ATEN_CPU_CAPABILITY']} but torch dispatches {capability} "
                            "(set after torch was imported, or this CPU has no AVX2)")
        branch = _mkl_branch()
        if branch not in (None, PIN["MKL_CBWR"]):
            problems.append(f"MKL_CBWR={PIN['MKL_CBWR']} but MKL runs branch {branch} (set after MKL started?)")
    if own and variables_pinned and "numpy" in sys.modules:
        core = _openblas_core()
        if core not in (None, PIN["OPENBLAS_CORETYPE"]):
            problems.append(f"OPENBLAS_CORETYPE={PIN['OPENBLAS_CORETYPE']} but numpy's OpenBLAS runs {core} kernels "
                            "(set after numpy was imported?)")
        wide = sorted(set(_numpy_simd() or ()) & set(NUMPY_AVX512_TARGETS))
        if wide:
            problems.append(f"NPY_DISABLE_CPU_FEATURES is set but numpy dispatches {', '.join(wide)} "
                            "(set after numpy was imported?)")
    return problems


def is_pinned(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: this process's) holds the pin (`pin_problems` is empty)."""
    return not pin_problems(environ)


def check_pinned(environ: Mapping[str, str] | None = None) -> None:
    """Raise `KernelPinError` naming each variable that is missing or wrong in ``environ`` (default: this process,
    its torch dispatch included)."""
    problems = pin_problems(environ)
    if problems:
        exports = " ".join(f"{name}={value}" for name, value in PIN.items())
        raise KernelPinError("this process is not pinned to the pipeline's CPU kernels: " + "; ".join(problems)
                             + f". Set the pin before torch is imported: `export {exports}` "
                             "(`env $(python -m dara.kernels env) <command>`; dara.kernels says why each).")


def enforce_pin() -> None:
    """`check_pinned` where this process is marked as one that must be pinned (``DARA_PIN_KERNELS=1``: every
    workflow job, the Makefile's torch targets); nothing elsewhere."""
    if os.environ.get(MARKER, "") not in ("", "0"):
        check_pinned()


def main(argv: list[str] | None = None) -> None:
    import json

    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "env"
    if command == "env":
        print(" ".join(env_assignments()))
    elif command == "show":
        print(json.dumps({"dispatch": dispatch(), "cpu": cpu()}, indent=2))
    elif command == "check":
        import torch  # noqa: F401 - so that the check reads torch's dispatch too

        try:
            check_pinned()
        except KernelPinError as error:
            raise SystemExit(str(error)) from None
        print("pinned: " + " ".join(env_assignments()))
    else:
        raise SystemExit(f"usage: python -m dara.kernels [env|show|check] (not {command!r})")


if __name__ == "__main__":
    main()
