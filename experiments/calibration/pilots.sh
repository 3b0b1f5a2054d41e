#!/usr/bin/env bash
# The calibration pilots behind experiments/tiny.yaml (docs/tiny_scale.md, "Calibration"): short runs of the drift
# control (shuffled) and of the per-channel baseline (GDPO) at the candidate learning rates, on the task options and
# geometry tiny.yaml holds. `make calibrate` runs them (about 15 minutes on 2 cores) into results/pilots/<name>/ and
# copies each pilot's pilot.csv and command.txt into docs/calibration/<name>/, then their medians into
# docs/calibration/summary.md. docs/calibration/exploratory/ holds the earlier pilots that shaped the task options
# (their commands are kept; they ran on earlier revisions of the tasks, so a rerun draws other demonstrations).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=results/pilots
pilot() {  # name, then the pilot's arguments
  local name=$1; shift
  "$PY" -m dara.tiny.pilot --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  mkdir -p "docs/calibration/$name"
  cp "$OUT/$name/pilot.csv" "$OUT/$name/command.txt" "docs/calibration/$name/"
}
share_warm_start() {  # reuse the first pilot's warm start (same task options and warm-start settings)
  mkdir -p "$OUT/$2"; cp -r "$OUT/$1/policy" "$OUT/$1/warm_settings.json" "$OUT/$2/"
}
mkdir -p "$OUT"
TOOL=(--target toolcall --methods shuffled gdpo --seeds 0 1 2 --group-size 4 --set steps=30 --set eval_every=30
      --crossing format=0.8 --heldout 96)
TOOL3=(--target three_rewards --methods shuffled gdpo --seeds 0 1 2 --group-size 4 --crossing format=0.8 --heldout 96)
MATH=(--target math_length --methods shuffled gdpo --seeds 0 1 --group-size 8 --set steps=40 --set eval_every=40
      --crossing length=0.8 --crossing length=0.95 --heldout 96)
{
  pilot toolcall-lr7e-4 "${TOOL[@]}" --set learning_rate=7e-4 --set lr_warmup_updates=0
  for lr in 3e-4 2e-4 1.5e-4; do
    share_warm_start toolcall-lr7e-4 "toolcall-lr$lr"
    pilot "toolcall-lr$lr" "${TOOL[@]}" --set learning_rate=$lr --set lr_warmup_updates=4
  done
  pilot toolcall3-lr2e-4 "${TOOL3[@]}" --set learning_rate=2e-4
  share_warm_start toolcall3-lr2e-4 toolcall3-lr1.5e-4
  pilot toolcall3-lr1.5e-4 "${TOOL3[@]}" --set learning_rate=1.5e-4
} &
tool_pilots=$!
{
  pilot math-lr3e-4-kl0 "${MATH[@]}" --set learning_rate=3e-4 --set kl_coef=0
  for config in 1.5e-4:0.1 1e-4:0.2 1.5e-4:0.5; do
    lr=${config%%:*}; kl=${config#*:}
    share_warm_start math-lr3e-4-kl0 "math-lr$lr-kl$kl"
    pilot "math-lr$lr-kl$kl" "${MATH[@]}" --set learning_rate=$lr --set kl_coef=$kl
  done
} &
math_pilots=$!
status=0
wait "$tool_pilots" || status=$?
wait "$math_pilots" || status=$?
if [ "$status" -ne 0 ]; then
  echo "a pilot failed (its log: $OUT/<name>.log)" >&2
  exit "$status"
fi
"$PY" -m dara.tiny.pilot --summarise docs/calibration/*/pilot.csv --out docs/calibration/summary.md
