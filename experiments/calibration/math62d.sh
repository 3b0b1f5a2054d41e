#!/usr/bin/env bash
# Candidate C2 on the replicate's math warm starts and seeds (docs/calibration/math62d-criteria.md, written before it
# ran): every math target at 384 responses a step and 1e-4, through the workflow up to its `criteria` rule, read as a
# study draw is. Its criteria and regime tables go to docs/calibration/math62d-c2-replicate/. About 50 minutes on
# 2 cores. Results under results/math62d_c2_replicate/ are reused (delete them to rerun).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
file=experiments/calibration/math62d/c2-replicate.yaml
"$PY" -m snakemake --cores "${CORES:-all}" --config scale="$file" -- criteria
out=docs/calibration/math62d-c2-replicate
mkdir -p "$out"
cp results/math62d_c2_replicate/tables/criteria.md results/math62d_c2_replicate/tables/criteria.csv \
  results/math62d_c2_replicate/tables/regime.md "$out/"
