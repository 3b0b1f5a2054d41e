"""The CPU kernel pin (dara.kernels): under it, a tiny warm start and run write the same bytes whichever CPU type's
native kernels the process would take; without it the same two processes differ; a process that must be pinned and
is not stops, naming the variable; every run's provenance and every warm start record the dispatch and the CPU."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import emulated_cpu
from dara import kernels, provenance
from debian_packages import ensure_debian_packages

TESTS = Path(__file__).resolve().parent

# Two CPU types' native dispatch, emulated on this CPU by the variables each library reads: ATen's capability,
# MKL's instruction cap (its vendor and ISA dispatch; on AMD MKL takes its own path whatever this says), oneDNN's.
# On an AVX-512 CPU: an AVX-512 type against an AVX2-only one; on an AVX2 CPU (no AVX-512 to emulate): an AVX2 type
# against one without AVX2 (x86-64's SSE2 baseline).
HAS_AVX512 = kernels.cpu()["flags"]["avx512f"]
# numpy's own ufunc loops by the targets it may dispatch (unset: all this CPU has).
NUMPY_AVX2 = {"NPY_DISABLE_CPU_FEATURES": "X86_V4,AVX512_ICL,AVX512_SPR"}
NUMPY_SSE = {"NPY_DISABLE_CPU_FEATURES": "X86_V3,X86_V4,AVX512_ICL,AVX512_SPR"}
# numpy's OpenBLAS takes its core type's kernels (dara.tiny.gemm's matmul): SkylakeX on AVX-512, Haswell on AVX2,
# Prescott (SSE3) below.
NATIVE = ({"avx512": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_ENABLE_INSTRUCTIONS": "AVX512",
                      "ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "OPENBLAS_CORETYPE": "SkylakeX"},
           "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "OPENBLAS_CORETYPE": "Haswell", **NUMPY_AVX2}}
          if HAS_AVX512 else
          {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                    "OPENBLAS_CORETYPE": "Haswell"},
           "sse": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                   "ONEDNN_MAX_CPU_ISA": "SSE41", "OPENBLAS_CORETYPE": "Prescott", **NUMPY_SSE}})
# What computes the tiny policy's products (dara.tiny.gemm): its linear layers' library and its attention's.
PRODUCTS = {"torch": ("torch", "sdpa"), "openblas": ("openblas", "sdpa"),
            "openblas_attention": ("openblas", "openblas")}
MATMULS = tuple(PRODUCTS)

# A warm start (60 supervised steps of a 1-layer policy, batches of 4) and 2 RL steps from it, in a fresh process:
# seconds here, about 110 on the emulated CPU, whose AVX2 arithmetic is slow (batches of the tests' usual 16 took 290
# there). Batches of 4 still leave the policy a format reward that varies, so the RL steps move the weights.
TRAIN = textwrap.dedent("""
    import sys
    from pathlib import Path

    from dara.experiments import default_settings
    from dara.runs import Run
    from dara.tiny.trainer import train
    from dara.tiny.warmstart import warm_start

    sys.path.insert(0, sys.argv[2])  # the tests' folder: the schema's warm-start defaults (experiment_defaults)
    from experiment_defaults import small_warm_start

    out, options = Path(sys.argv[1]), {"tag_rate": 0.5}
    warm_start("act_critic", options, out / "policy", **small_warm_start(sft_batch_size=4), matmul=sys.argv[3],
               attention=sys.argv[4])
    settings = dict(default_settings(), task_options=options, steps=2, responses_per_step=16, max_new_tokens=20,
                    prompt_pool=100, eval_every=2, state_every=2)
    run = Run(scale="tiny", backend="tiny", task="act_critic", method="dara_sym", group_size=4, seed=0,
              settings=settings, results=str(out / "results"))
    train(run, policy=str(out / "policy"), progress=False)
    print(run.run_dir)
""")
# What a process inherits from pytest's, whatever pin or cap pytest itself runs under.
CLEARED = {*kernels.PIN, kernels.MARKER, "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _environment(extra: dict[str, str], *, pinned: bool) -> dict[str, str]:
    """pytest's environment without any pin or cap, with ``extra`` (pinned: then the pin over it)."""
    env = {**{key: value for key, value in os.environ.items() if key not in CLEARED}, "OMP_NUM_THREADS": "1", **extra}
    return kernels.pinned_environment(env) if pinned else env


def _train(folder: Path, extra: dict[str, str], *, pinned: bool, matmul: str = "torch",
           emulator: tuple[str, ...] = ()) -> dict:
    """Run `TRAIN` into ``folder`` under `_environment` (on ``emulator``'s CPU where one is named); returns what must
    repeat: weights, metrics (but the wall time), rollouts, and the two provenance records."""
    env = _environment(extra, pinned=pinned)
    done = subprocess.run([*emulator, sys.executable, "-c", TRAIN, str(folder), str(TESTS), *PRODUCTS[matmul]],
                          env=env, capture_output=True, text=True, timeout=900 if emulator else 300)
    assert done.returncode == 0, done.stderr[-4000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    return {
        "weights": {str(path.relative_to(folder)): _sha(path) for path in sorted(folder.rglob("model.safetensors"))},
        "metrics": metrics.drop(columns="seconds"),
        "rollouts": _sha(run_dir / "rollouts.parquet"),
        "machine": provenance.read_machine(run_dir),
        "warm_start_machine": json.loads((folder / "policy" / "warmstart.json").read_text())["machine"],
    }


def _same(a: dict, b: dict) -> bool:
    return a["weights"] == b["weights"] and a["metrics"].equals(b["metrics"]) and a["rollouts"] == b["rollouts"]


class _Trained(dict):
    """`_train` of (CPU type, pinned, GEMM library), each run the first time a test asks for it."""

    def __init__(self, root: Path):
        super().__init__()
        self.root = root

    def __missing__(self, key: tuple[str, bool, str]) -> dict:
        kind, pinned, matmul = key
        self[key] = _train(self.root / f"{kind}-{'pinned' if pinned else 'native'}-{matmul}", NATIVE[kind],
                           pinned=pinned, matmul=matmul)
        return self[key]


# The tests that train (12 processes here, two more on the emulator) run on one pytest-xdist worker: a module
# fixture is made once per worker, and spread over two workers these processes ran twice (about 150 s each).
KERNELS_GROUP = "kernels_trained"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> _Trained:
    """Each emulated CPU type, pinned and not, with each GEMM library (made as the tests ask)."""
    return _Trained(tmp_path_factory.mktemp("kernels"))


@pytest.mark.xdist_group(KERNELS_GROUP)
@pytest.mark.parametrize("matmul", MATMULS)
def test_the_pin_gives_the_same_bytes_on_both_cpu_types(trained, matmul):
    first, second = (trained[kind, True, matmul] for kind in NATIVE)
    assert first["weights"] and len(first["weights"]) == 3  # the warm start and the run's checkpoints 0 and 2
    assert len(set(first["weights"].values())) == 2  # the RL steps moved the weights (checkpoint 0 is the warm start)
    assert first["weights"] == second["weights"]
    pd.testing.assert_frame_equal(first["metrics"], second["metrics"], check_exact=True)
    assert first["rollouts"] == second["rollouts"]


@pytest.mark.xdist_group(KERNELS_GROUP)
@pytest.mark.parametrize("matmul", MATMULS)
def test_without_the_pin_the_same_two_processes_differ(trained, matmul):
    """The comparison above can fail: the CPU types' native kernels round differently, and it shows in the bytes."""
    first, second = (trained[kind, False, matmul] for kind in NATIVE)
    assert first["weights"]["policy/model.safetensors"] != second["weights"]["policy/model.safetensors"]
    assert not _same(first, second)


@pytest.mark.xdist_group(KERNELS_GROUP)
def test_the_two_gemm_libraries_are_two_draws(trained):
    """Under the pin, OpenBLAS and MKL round differently, and so do OpenBLAS's attention and SDPA: a policy's matmul
    and attention are part of its draw."""
    kind = next(iter(NATIVE))
    weights = [trained[kind, True, matmul]["weights"]["policy/model.safetensors"] for matmul in MATMULS]
    assert len(set(weights)) == len(MATMULS)


@pytest.mark.xdist_group(KERNELS_GROUP)
def test_a_pinned_process_records_the_pinned_dispatch_and_the_cpu(trained):
    for kind in NATIVE:
        for record in (trained[kind, True, "torch"]["machine"], trained[kind, True, "openblas"]["warm_start_machine"]):
            dispatch = record["dispatch"]
            assert dispatch["aten_cpu_capability"] == kernels.PINNED_CAPABILITY
            assert dispatch["variables"] == kernels.PIN and dispatch["pinned"] is True and dispatch["marker"] == "1"
            assert dispatch["mkl_cbwr_branch"] in (kernels.PIN["MKL_CBWR"], None)
            assert dispatch["openblas_core"] == kernels.PIN["OPENBLAS_CORETYPE"]
            assert dispatch["torch_threads"] == 1
            assert dispatch["numpy_simd"] is not None
            assert not set(dispatch["numpy_simd"]) & set(kernels.NUMPY_AVX512_TARGETS)
            assert record["cpu"] == kernels.cpu()
        native = trained[kind, False, "torch"]["machine"]["dispatch"]
        assert native["pinned"] is False and native["variables"]["MKL_CBWR"] is None
    if HAS_AVX512:
        assert trained["avx512", False, "torch"]["machine"]["dispatch"]["aten_cpu_capability"] == "AVX512"
        assert trained["avx512", False, "openblas"]["machine"]["dispatch"]["openblas_core"] == "SkylakeX"
        assert "X86_V4" in trained["avx512", False, "torch"]["machine"]["dispatch"]["numpy_simd"]


# numpy's transcendental ufuncs, whose SIMD loops round differently at each vector width (float64's exp, log and
# power between AVX-512 and AVX2; float32's between AVX2 and below).
NUMPY_MATH = textwrap.dedent("""
    import hashlib
    import numpy as np

    x = np.random.default_rng(0).normal(size=100_000) * 5
    digest = hashlib.sha256()
    for values in (x, x.astype(np.float32)):
        for result in (np.exp(values), np.log(np.abs(values) + 1e-3), np.power(np.abs(values), 0.37)):
            digest.update(result.tobytes())
    print(digest.hexdigest())
""")


def _numpy_math(extra: dict[str, str], *, pinned: bool) -> str:
    done = subprocess.run([sys.executable, "-c", NUMPY_MATH], env=_environment(extra, pinned=pinned),
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_the_pin_gives_numpy_math_the_same_bytes_on_both_cpu_types():
    """The analysis's libraries call numpy's ufuncs: under the pin, both emulated CPU types' give the bytes of an
    AVX2 CPU's own numpy, and without it the two types differ (so the comparison can fail)."""
    pinned = {_numpy_math(extra, pinned=True) for extra in NATIVE.values()}
    native = {kind: _numpy_math(extra, pinned=False) for kind, extra in NATIVE.items()}
    assert pinned == {native["avx2"]}
    assert len(set(native.values())) == 2


# An Intel CPU without AVX-512, emulated: QEMU's user mode with its Haswell model, as make check-emulated-cpu runs a
# draw's jobs (benchmarks/emulated_cpu.py says what it shows: a byte that depends on the vendor's dispatch or on the
# approximate reciprocal instructions differs between this process and a native one).
EMULATED_INTEL_AVX2 = (emulated_cpu.EMULATOR, "-cpu", emulated_cpu.DEFAULT_CPU)


@pytest.fixture(scope="module")
def emulator() -> tuple[str, ...]:
    """The emulator's command, its Debian package installed when missing (as tests/cluster installs Slurm)."""
    ensure_debian_packages((emulated_cpu.EMULATOR,), ("qemu-user",), "the emulated-CPU tests")
    return EMULATED_INTEL_AVX2


@pytest.mark.xdist_group(KERNELS_GROUP)
def test_an_emulated_intel_avx2_cpu_writes_the_same_bytes_under_the_pin(emulator, trained, tmp_path):
    """The policy as the pipeline makes it (OpenBLAS products and attention) through a warm start and two RL steps,
    here and on the emulated Intel AVX2 CPU, both pinned: the same weights, rollouts and metrics. Before the
    optimisers were fused and the estimators' square root made exact, the warm starts differed here."""
    # this CPU's pinned run (either type's: the test above shows they are one)
    native = trained[next(iter(NATIVE)), True, "openblas_attention"]
    emulated = _train(tmp_path / "emulated", {}, pinned=True, matmul="openblas_attention", emulator=emulator)
    # first, that the emulated CPU ran the pinned kernels (an emulator without AVX2 would fall back to others)
    for record in (emulated["machine"], emulated["warm_start_machine"]):
        assert record["dispatch"]["aten_cpu_capability"] == kernels.PINNED_CAPABILITY
        assert record["dispatch"]["openblas_core"] == kernels.PIN["OPENBLAS_CORETYPE"]
    assert len(native["weights"]) == 3 and len(set(native["weights"].values())) == 2
    assert emulated["weights"] == native["weights"]
    pd.testing.assert_frame_equal(emulated["metrics"], native["metrics"], check_exact=True)
    assert emulated["rollouts"] == native["rollouts"]


SQUARE_ROOTS = textwrap.dedent("""
    import hashlib

    import numpy as np
    import torch

    from dara.advantages import exact_sqrt

    rng = np.random.default_rng(0)
    for values in (rng.random(100_000) * 10, (rng.random(100_000) * 10).astype(np.float32)):
        x = torch.from_numpy(values)
        exact = exact_sqrt(x).numpy()
        print(hashlib.sha256(torch.sqrt(x).numpy().tobytes()).hexdigest(), hashlib.sha256(exact.tobytes()).hexdigest(),
              bool((exact == np.sqrt(values)).all()))
""")


@pytest.mark.xdist_group(KERNELS_GROUP)
def test_torch_sqrt_depends_on_the_cpu_and_exact_sqrt_does_not(emulator):
    """Why the comparison above can fail: ATen's CPU sqrt (MKL's vector math, pinned branch or not) gives other bytes
    on the emulated CPU, whose approximate reciprocal square root is exact; `exact_sqrt` gives the same. The first
    half is a canary on how torch computes sqrt today: a torch that stops calling MKL for it fails it, and then the
    workaround may go."""
    def digests(prefix: tuple[str, ...]) -> list[list[str]]:
        done = subprocess.run([*prefix, sys.executable, "-c", SQUARE_ROOTS], env=_environment({}, pinned=True),
                              capture_output=True, text=True, timeout=600, check=True)
        return [line.split() for line in done.stdout.strip().splitlines()]

    native, emulated = digests(()), digests(emulator)
    assert len(native) == 2
    for (torch_here, exact_here, correct_here), (torch_there, exact_there, correct_there) in zip(native, emulated):
        assert torch_here != torch_there
        assert exact_here == exact_there and correct_here == correct_there == "True"


@pytest.mark.parametrize("name", sorted(kernels.PIN))
def test_the_check_names_a_missing_or_wrong_variable(name):
    pinned = kernels.pinned_environment({})
    kernels.check_pinned(pinned)  # the whole pin passes
    missing = {key: value for key, value in pinned.items() if key != name}
    with pytest.raises(kernels.KernelPinError, match=f"{name} is not set"):
        kernels.check_pinned(missing)
    with pytest.raises(kernels.KernelPinError, match=f"{name}=wrong \\(the pin needs {name}={kernels.PIN[name]}\\)"):
        kernels.check_pinned({**pinned, name: "wrong"})
    assert not kernels.is_pinned(missing) and kernels.is_pinned(pinned)


def test_a_marked_process_that_is_not_pinned_writes_no_provenance(tmp_path, monkeypatch):
    for name in kernels.PIN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(kernels.MARKER, "1")
    with pytest.raises(kernels.KernelPinError, match="ATEN_CPU_CAPABILITY is not set"):
        provenance.write_run_provenance(tmp_path, {"seed": 0})
    assert not list(tmp_path.iterdir())
    monkeypatch.delenv(kernels.MARKER)  # unmarked (a test, a command typed by hand): recorded, not refused
    provenance.write_run_provenance(tmp_path, {"seed": 0})
    assert provenance.read_machine(tmp_path)["dispatch"]["pinned"] is False


def test_variables_set_after_torch_was_imported_do_not_count(monkeypatch):
    import torch

    if torch.backends.cpu.get_cpu_capability() == kernels.PINNED_CAPABILITY:
        pytest.skip("this process's torch already dispatches the pinned capability")
    for name, value in kernels.pinned_environment({}).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(kernels.KernelPinError, match="but torch dispatches"):
        kernels.check_pinned()


def test_an_openblas_started_before_its_variables_were_set_does_not_count(monkeypatch):
    import numpy  # noqa: F401 - OpenBLAS has chosen its kernels by now

    core = kernels.dispatch()["openblas_core"]
    if core in (None, kernels.PIN["OPENBLAS_CORETYPE"]):
        pytest.skip(f"this process's OpenBLAS already runs the pinned kernels ({core})")
    for name, value in kernels.pinned_environment({}).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(kernels.KernelPinError, match=f"numpy's OpenBLAS runs {core} kernels"):
        kernels.check_pinned()


def test_a_numpy_imported_before_its_variable_was_set_does_not_count(monkeypatch):
    wide = sorted(set(kernels.dispatch()["numpy_simd"]) & set(kernels.NUMPY_AVX512_TARGETS))
    if not wide:
        pytest.skip("this process's numpy dispatches no AVX-512 loop")
    for name, value in kernels.pinned_environment({}).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(kernels.KernelPinError, match=f"but numpy dispatches {wide[0]}"):
        kernels.check_pinned()


def test_every_run_folder_records_the_machine_beside_its_revision(tmp_path):
    import torch

    provenance.write_run_provenance(tmp_path, {"seed": 0})
    assert provenance.read_revision(tmp_path) == provenance.git_revision()["revision"]
    machine = provenance.read_machine(tmp_path)
    assert machine["dispatch"]["aten_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["dispatch"]["mkldnn_enabled"] == torch.backends.mkldnn.enabled
    assert machine["dispatch"]["torch"] == torch.__version__
    assert set(machine["dispatch"]["variables"]) == set(kernels.PIN)
    assert machine["cpu"]["model_name"] and set(machine["cpu"]["flags"]) == set(kernels.CPU_FLAGS)


def test_the_workflow_and_the_makefile_export_the_pin():
    root = Path(__file__).resolve().parents[1]
    common = (root / "workflow" / "rules" / "common.smk").read_text()
    assert "shell.prefix(" in common and "{shell_exports()}" in common
    exports = kernels.shell_exports()
    assert exports.startswith("export ") and all(f"{name}={value}" in exports for name, value in kernels.PIN.items())
    makefile = (root / "Makefile").read_text()
    for target in ("calibrate", "bench-trainer", "bench-verl-cpu", "verl-cpu-rerun"):
        recipe = makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]
        assert "-m dara.kernels env" in recipe, target
    shown = subprocess.run([sys.executable, "-m", "dara.kernels", "env"], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == kernels.env_assignments()


def test_a_cpu_without_avx2_and_fma_is_refused_by_name(monkeypatch):
    """OpenBLAS forced to its Haswell kernels would stop such a CPU at its first product with an illegal
    instruction; the pin check names the missing flags first."""
    for name, value in kernels.pinned_environment({}).items():
        monkeypatch.setenv(name, value)
    record = kernels.cpu()
    monkeypatch.setattr(kernels, "cpu", lambda: {**record, "flags": {**record["flags"], "avx2": False, "fma": False}})
    assert "this CPU has no avx2 or fma, which the pinned kernels need" in " ".join(kernels.pin_problems())
    monkeypatch.setattr(kernels, "cpu", lambda: {**record, "flags": {**record["flags"], "avx2": True, "fma": True}})
    assert not any("which the pinned kernels need" in problem for problem in kernels.pin_problems())
