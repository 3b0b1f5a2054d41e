# Quick start: `make reproduce` (set-up, then the tiny pipeline) and `make test` (set-up, then the suite).
# Every target is idempotent: an environment is rebuilt only when its requirement files change.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BFCL_VENV := .venv-bfcl
INSTALL := -m pip install -q
PIP := $(VENV)/bin/python $(INSTALL)
# The main environment's bytecode is compiled after its packages are in, on every core (pip compiles one file at a
# time, and this environment's ~20,000 files are most of a fresh make test's set-up); what it leaves is what pip
# would. Bytecode must be there: where PYTHONDONTWRITEBYTECODE is set, Python would compile each imported module
# again in every process. A file that does not compile (a template, a Python 2 test in some package) is skipped,
# as pip skips it, hence the `|| true`.
COMPILE = $(VENV)/bin/python -m compileall -qq -j 0 $(VENV)/lib || true
CORES ?= all

.PHONY: setup setup-test setup-bfcl reproduce replicate calibrate verl-cpu snapshot smoke test test-cluster bench bench-trainer profile-trainer check-emulated-cpu bench-verl-cpu verl-cpu-rerun gpu-check gpu-bundle notebooks clean-envs

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Stamp files record which requirement files an environment was built from.
$(VENV)/.cpu-stamp: envs/cpu.txt envs/cpu-nodeps.txt pyproject.toml | $(VENV)/bin/python
	$(PIP) --no-compile -r envs/cpu.txt
	$(PIP) --no-compile --no-deps -r envs/cpu-nodeps.txt
	$(PIP) --no-deps -e .
	$(COMPILE)
	touch $@

$(VENV)/.test-stamp: $(VENV)/.cpu-stamp envs/test.txt envs/verl-cpu.txt envs/verl-cpu-nodeps.txt envs/trl.txt
	$(PIP) --no-compile -r envs/test.txt -r envs/verl-cpu.txt
	$(PIP) --no-compile --no-deps -r envs/verl-cpu-nodeps.txt
	$(PIP) --no-compile --no-deps -r envs/trl.txt
	$(COMPILE)
	touch $@

# bfcl-eval pins numpy==1.26.4 and pulls a CUDA torch with its full install, so it lives in its own
# environment, installed without its heavy optional dependencies (see envs/bfcl.txt). Its packages install beside
# the main environment's when make runs two jobs (make test does); this project goes in after the main
# environment's copy (order only: both editable installs write src/dara.egg-info).
$(BFCL_VENV)/.deps-stamp: envs/bfcl.txt envs/bfcl-nodeps.txt
	test -x $(BFCL_VENV)/bin/python || $(PYTHON) -m venv $(BFCL_VENV)
	$(BFCL_VENV)/bin/python $(INSTALL) -r envs/bfcl.txt
	$(BFCL_VENV)/bin/python $(INSTALL) --no-deps -r envs/bfcl-nodeps.txt
	touch $@

$(BFCL_VENV)/.stamp: $(BFCL_VENV)/.deps-stamp pyproject.toml | $(VENV)/.cpu-stamp
	$(BFCL_VENV)/bin/python $(INSTALL) --no-deps -e .
	touch $@

setup: $(VENV)/.cpu-stamp $(BFCL_VENV)/.stamp
setup-test: setup $(VENV)/.test-stamp

# The wall time of the workflow (after set-up) is recorded for the snapshot (analysis/snapshot.py), with whether it
# started from an empty results/tiny (a partial rerun is faster and says so), and its jobs' times are copied to
# results/tiny/reproduce_benchmarks/ (the workflow's benchmarks/ is rewritten by any later job; the snapshot and the
# ledger read the draw's cost from the copy).
reproduce: setup
	@empty=$$(test -d results/tiny/runs && echo no || echo yes); start=$$(date +%s); \
	$(VENV)/bin/snakemake --cores $(CORES) && \
	copy=results/tiny/reproduce_benchmarks && rm -rf $$copy.tmp && cp -r results/tiny/benchmarks $$copy.tmp && \
	rm -rf $$copy && mv $$copy.tmp $$copy && \
	echo "$$(( $$(date +%s) - start )) seconds; started from an empty results/tiny: $$empty" \
	  > results/tiny/reproduce_seconds.txt

# An independent replicate of the study (experiments/tiny_replicate.yaml: every seed and warm start of tiny.yaml
# shifted, results in results/tiny_replicate), then each claim's verdict and the regime criteria in both side by side
# (results/tiny/tables/replicates.{csv,md}, replicate_criteria.{csv,md}): run after make reproduce. As long as make
# reproduce.
replicate: setup
	$(VENV)/bin/snakemake --cores $(CORES) --config scale=tiny_replicate
	$(VENV)/bin/python analysis/replicates.py --study results/tiny --replicate results/tiny_replicate \
	  --out results/tiny/tables

# The calibration pilots behind experiments/tiny.yaml (docs/tiny_scale.md, "Calibration"); their tables land in
# docs/calibration/.
calibrate: $(VENV)/.cpu-stamp
	pin=$$($(VENV)/bin/python -m dara.kernels env) && env $$pin PYTHON=$(VENV)/bin/python experiments/calibration/pilots.sh

# The opt-in verl_cpu scale (verl's training loop on CPU beside the tiny trainer; needs verl: the test environment).
# Its wall time is recorded like reproduce's.
verl-cpu: setup-test
	@empty=$$(test -d results/verl_cpu/runs && echo no || echo yes); start=$$(date +%s); \
	$(VENV)/bin/snakemake --cores 2 --config scale=verl_cpu && \
	echo "$$(( $$(date +%s) - start )) seconds; started from an empty results/verl_cpu: $$empty" \
	  > results/verl_cpu/run_seconds.txt

# docs/results/ and the generated blocks of README.md and docs/ from results/tiny (after make reproduce), and from
# results/verl_cpu when make verl-cpu has run. The finished tiny draw joins the ledger of reproductions first
# (docs/results/ledger.csv: refused when partial, dirty or mixed; a draw already recorded is left as it is).
snapshot: setup
	$(VENV)/bin/python analysis/snapshot.py

smoke: setup-test  # its trl target needs TRL (envs/trl.txt, installed with the test environment)
	$(VENV)/bin/snakemake --cores 2 --config scale=smoke

# Two pytest-xdist workers (TEST_WORKERS; the tests are independent, and those that read the smoke pipeline's results
# run as one group on one worker, tests/conftest.py), and the set-up in two make jobs (the bfcl environment beside
# the main one).
TEST_WORKERS ?= 2
test:
	$(MAKE) --jobs=2 setup-test
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

# The cluster tests (tests/cluster, marker `cluster`): a throwaway Slurm cluster with accounting on this machine
# (Debian's slurm-wlm, slurmdbd, munge, mariadb-server, installed when missing: needs root), then the smoke scale
# through the Slurm executor, every paper job against the controller, and ray_job.sh on two nodes. The cluster is
# stopped afterwards, also when a test fails.
$(VENV)/.cluster-stamp: $(VENV)/.test-stamp envs/cluster.txt
	$(PIP) -r envs/cluster.txt
	touch $@

test-cluster: $(VENV)/.cluster-stamp
	$(VENV)/bin/python -m pytest -m cluster tests/cluster

# JupyterLab and jupytext (envs/notebooks.txt) in .venv; the settings override makes a double click open a .py
# file as a notebook (the analysis notebooks are jupytext percent files). They read results/tiny by default.
$(VENV)/.notebooks-stamp: $(VENV)/.cpu-stamp envs/notebooks.txt envs/jupyterlab-overrides.json
	$(PIP) -r envs/notebooks.txt
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp envs/jupyterlab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

# Jupyter refuses to run as root without --allow-root (containers often run as root).
notebooks: $(VENV)/.notebooks-stamp
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=analysis/notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

# Under the kernel pin, as every other benchmark and job: its rows in bench_history.csv name the dispatch.
bench: setup-test
	pin=$$($(VENV)/bin/python -m dara.kernels env) && env $$pin $(VENV)/bin/python -m benchmarks.bench_advantages --out docs/results/bench_advantages.md

# The tiny trainer's step against revision bf5bb9d; needs results/tiny/policies/toolcall/warm_start0 (or pass --policy).
bench-trainer: $(VENV)/.cpu-stamp
	pin=$$($(VENV)/bin/python -m dara.kernels env) && env $$pin $(VENV)/bin/python -m benchmarks.bench_trainer --out docs/results/bench_trainer.md
	$(VENV)/bin/python analysis/snapshot.py --blocks

# Where a tiny-trainer step and a warm-start step spend their time against one core's measured GEMM peak and memory
# bandwidth (docs/performance.md); uses results/tiny/policies/toolcall/warm_start0, or makes one (about a minute).
profile-trainer: $(VENV)/.cpu-stamp
	pin=$$($(VENV)/bin/python -m dara.kernels env) && env $$pin $(VENV)/bin/python -m benchmarks.profile_trainer --out docs/results/profile_trainer.md

# QEMU 8 or later for the emulated check (Debian 12's qemu-user, 7.2, mis-executes numpy's AVX2 sort of 64-bit
# integers: benchmarks/emulated_cpu.py probes it): bookworm-backports' qemu-user (10.0), unpacked under build/qemu
# beside the system's, not installed over it. Needs root once (apt's sources and lists) and Debian 12; elsewhere
# install QEMU 8 or later and name it: make check-emulated-cpu QEMU=/usr/bin/qemu-x86_64.
QEMU ?= build/qemu/usr/bin/qemu-x86_64
build/qemu/usr/bin/qemu-x86_64:
	test "$$(id -u)" = 0 || { echo "fetching QEMU from Debian's bookworm-backports needs root once" >&2; exit 1; }
	. /etc/os-release && test "$$VERSION_CODENAME" = bookworm || { echo "bookworm-backports' QEMU is for Debian 12; \
	  install QEMU 8 or later and pass QEMU=<its qemu-x86_64>" >&2; exit 1; }
	test -f /etc/apt/sources.list.d/bookworm-backports.sources || { \
	  uris=$$(awk '/^URIs:/ {print $$2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null) && \
	  test -n "$$uris" || { echo "no URIs in /etc/apt/sources.list.d/debian.sources to take the mirror from" >&2; \
	  exit 1; }; printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
	  "$$uris" /usr/share/keyrings/debian-archive-keyring.gpg > /etc/apt/sources.list.d/bookworm-backports.sources; }
	apt-get update -qq
	rm -rf build/qemu && mkdir -p build/qemu
	cd build/qemu && apt-get download -qq -t bookworm-backports qemu-user && dpkg-deb -x qemu-user_*.deb . \
	  && rm qemu-user_*.deb
	$@ --version

# results/tiny's toolcall warm start, two runs, their held-out evaluations and the analysis scripts rerun on an
# emulated Intel CPU with AVX2 and no AVX-512 (QEMU's user mode), their bytes compared with the draw's
# (benchmarks/emulated_cpu.py; docs/results/emulated_cpu.md): about four hours on one core, after make reproduce; a
# job finished by an earlier call on the same inputs is reused. EMULATED_CPU_ARGS=--allow-other-code checks a draw
# whose src/ differs from this checkout's (the page lists the files).
check-emulated-cpu: $(VENV)/.cpu-stamp $(QEMU)
	$(VENV)/bin/python -m benchmarks.emulated_cpu --emulator $(QEMU) --work build/emulated_cpu \
	  --out docs/results/emulated_cpu.md $(EMULATED_CPU_ARGS)

# verl's CPU step with the batched hf rollout against one request at a time (about 10 minutes on 2 cores); builds
# the verl_cpu scale's tool-calling data (warm start and verl data) first.
VERL_CPU_BENCH_DATA := results/verl_cpu/data/toolcall/train.parquet
bench-verl-cpu: $(VENV)/.test-stamp
	$(VENV)/bin/snakemake --cores 2 $(VERL_CPU_BENCH_DATA) --config scale=verl_cpu
	pin=$$($(VENV)/bin/python -m dara.kernels env) && env $$pin $(VENV)/bin/python -m benchmarks.bench_verl_cpu --out docs/results/bench_verl_cpu.md

# Three of make verl-cpu's verl runs trained again and compared with the first time (about 6 minutes on 2 cores):
# how far a verl CPU run repeats (docs/paper_scale.md).
verl-cpu-rerun: $(VENV)/.test-stamp
	pin=$$($(VENV)/bin/python -m dara.kernels env) && env $$pin $(VENV)/bin/python -m benchmarks.verl_cpu_rerun --out docs/results/verl_cpu_rerun.md

# The paper path on a GPU in a few minutes (docs/gpu_check.md): every estimator and the tiny policy on the device
# against the CPU, dara.trl with three methods, verl's loop (FSDP2, the hf rollout) with GDPO and DARA-Asym; one
# summary, results/gpu_check/summary.md; exits non-zero if a part failed. DEVICE=cpu is its dry run without a GPU.
# No set-up: it runs with the test environment where there is one, else with python3 or a PYTHON given to make (the
# interpreter gpu_bundle/activate.sh checks the bundle with; not this file's python3.11 preference) and what
# PYTHONPATH holds (a GPU machine with the GPU bundle); GPU_CHECK_ARGS passes more options (--steps, --data-dir,
# --time-limit, --verl).
DEVICE ?= cuda
GPU_CHECK_OUT ?= results/gpu_check
GPU_CHECK_PYTHON ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,\
  $(if $(filter file,$(origin PYTHON)),python3,$(PYTHON)))
gpu-check:
	PYTHONPATH=$(CURDIR)/src$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_CHECK_PYTHON) -m benchmarks.gpu_check --device $(DEVICE) \
	  --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

# What a GPU machine without network needs beside its image (docs/gpu_bundle.md): verl 0.9.1 and its requirements,
# a trimmed ray, transformers at verl's pin, TRL, jsonschema (envs/gpu-bundle.txt, wheels from PyPI for Python 3.12)
# and the verl_cpu scale's tool-calling warm start and data, as tar.xz archives in build/gpu-bundle (carry that
# folder; `source gpu_bundle/activate.sh` there). Prints the size; fails over 60 MiB with the repository.
GPU_BUNDLE_DATA := results/verl_cpu/data/toolcall/train.parquet
gpu-bundle: $(VENV)/.test-stamp
	$(VENV)/bin/snakemake --cores 2 $(GPU_BUNDLE_DATA) --config scale=verl_cpu
	$(VENV)/bin/python gpu_bundle/build.py --out build/gpu-bundle

clean-envs:
	rm -rf $(VENV) $(BFCL_VENV)
