#!/usr/bin/env bash
# Candidate C3 (docs/calibration/math62e-criteria.md, written before it ran): the study's math setting with a cosine
# learning-rate decay, every math target on the study's warm starts and seeds and on the replicate's
# (experiments/calibration/math62e/cosine-{study,replicate}.yaml), each through the workflow up to its `criteria`
# rule, so that it is read exactly as a study draw is. The warm starts are copied in where `make reproduce` and
# `make replicate` (or math62d.sh) made them: the same warm-start settings and seeds, so the same policies under the
# kernel pin; elsewhere the workflow trains them. Each draw's criteria and regime tables go to
# docs/calibration/math62e-cosine-<draw>/. About 50 minutes on 2 cores. A draw whose results are under
# results/<its scale>/ is not run again (mtime triggers): delete them to rerun.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
for draw in study replicate; do
  file=experiments/calibration/math62e/cosine-$draw.yaml
  scale=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['scale'])" "$file")
  if [ "$draw" = study ]; then made=(results/tiny); study=tiny; else
    made=(results/tiny_replicate results/math62d_c2_replicate); study=experiments/tiny_replicate.yaml; fi
  for k in $("$PY" -c "import sys, yaml; print(*yaml.safe_load(open(sys.argv[1]))['tasks']['math_length']['warm_starts'])" "$file"); do
    pilot=results/$scale/policies/math_length/warm_start$k
    for root in "${made[@]}"; do
      source=$root/policies/math_length/warm_start$k
      if [ -f "$source/warmstart.json" ] && [ ! -e "$pilot" ] && "$PY" -c "import sys
from dara.experiments import load_experiment, warm_start_settings
k = int(sys.argv[3])
sys.exit(warm_start_settings(load_experiment(sys.argv[1]), 'math_length', k)
         != warm_start_settings(load_experiment(sys.argv[2]), 'math_length', k))" "$file" "$study" "$k"; then
        mkdir -p "$(dirname "$pilot")" && cp -r "$source" "$pilot"
      fi
    done
  done
  # mtime only: the copied warm starts carry no Snakemake metadata of this scale, and are not to be remade
  "$PY" -m snakemake --cores "${CORES:-all}" --config scale="$file" --rerun-triggers mtime -- criteria
  out=docs/calibration/math62e-cosine-$draw
  mkdir -p "$out"
  cp "results/$scale/tables/criteria.md" "results/$scale/tables/criteria.csv" "results/$scale/tables/regime.md" "$out/"
done
