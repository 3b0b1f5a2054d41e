#!/usr/bin/env bash
# The math62c pilots (docs/calibration/math62c-criteria.md, written before they ran): the math task's GDPO and drift
# control on the study's five warm starts at two candidate settings, each an experiment file of its own
# (experiments/calibration/math62c/*.yaml) run through the workflow up to its `criteria` rule, so that it is read
# exactly as the study is. The study's math warm starts are copied in where `make reproduce` made them (the same
# warm-start settings and seeds: the same policies under the kernel pin); elsewhere the workflow trains them.
# Each pilot's criteria and regime tables go to docs/calibration/math62c-<candidate>/. About 40 minutes on 2 cores.
# A pilot whose results are under results/<its scale>/ is not run again (mtime triggers): delete them to rerun.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
for file in experiments/calibration/math62c/*.yaml; do
  scale=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['scale'])" "$file")
  # only where the pilot's warm-start settings are the study's (else the workflow makes the pilot's own)
  same=$("$PY" -c "import sys
from dara.experiments import load_experiment, warm_start_settings
study, pilot = load_experiment('tiny'), load_experiment(sys.argv[1])
print(all(warm_start_settings(study, 'math_length', k) == warm_start_settings(pilot, 'math_length', k)
          for k in range(5)))" "$file")
  for k in 0 1 2 3 4; do
    study=results/tiny/policies/math_length/warm_start$k
    pilot=results/$scale/policies/math_length/warm_start$k
    if [ "$same" = True ] && [ -f "$study/warmstart.json" ] && [ ! -e "$pilot" ]; then
      mkdir -p "$(dirname "$pilot")" && cp -r "$study" "$pilot"
    fi
  done
  # mtime only: the copied warm starts carry no Snakemake metadata of this scale, and are not to be remade
  "$PY" -m snakemake --cores "${CORES:-all}" --config scale="$file" --rerun-triggers mtime -- criteria
  out=docs/calibration/math62c-$(basename "$file" .yaml)
  mkdir -p "$out"
  cp "results/$scale/tables/criteria.md" "results/$scale/tables/criteria.csv" "results/$scale/tables/regime.md" "$out/"
done
