#!/usr/bin/env bash
# The calibration pilots behind experiments/tiny.yaml (docs/tiny_scale.md, "Calibration"): the step-0 screens of the
# tool task's format rate, then short runs of the drift control (shuffled) and of the per-channel baseline (GDPO) at
# the candidate learning rates and KL weights, each evaluated as the pipeline evaluates (--evaluate: BFCL's tool
# accuracy, math's held-out accuracy). `make calibrate` runs them (about 2 hours on 2 cores) into
# results/pilots/<name>/ and copies each pilot's pilot.csv and command.txt into docs/calibration/<name>/, then their
# medians into docs/calibration/summary.md. docs/calibration/exploratory/ holds the earlier pilots that shaped the
# task options, and the pilots of the math task before its slips (their commands are kept; they ran on earlier
# revisions of the tasks, so a rerun draws other demonstrations).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=results/pilots
pilot() {  # name, then the pilot's arguments
  local name=$1; shift
  "$PY" -m dara.pilot --out "$OUT/$name" "$@" > "$OUT/$name.log" 2>&1
  mkdir -p "docs/calibration/$name"
  cp "$OUT/$name/pilot.csv" "$OUT/$name/command.txt" "docs/calibration/$name/"
}
share_warm_start() {  # reuse the first pilot's warm start (same task options and warm-start settings)
  # a pilot's folder is a results tree (dara.runs' layout): its warm starts lie in <pilot>/<scale>/policies/<task>/warm_start0,
  # and these pilots are the tiny scale's (dara.pilot's default --experiment)
  mkdir -p "$OUT/$2/tiny"; cp -r "$OUT/$1/tiny/policies" "$OUT/$2/tiny/"; cp "$OUT/$1/warm_settings.json" "$OUT/$2/"
}
mkdir -p "$OUT"
# step 0 only: the format density, GDPO's share and DARA's weight of the first batch of 10 seeds
SCREEN=(--target toolcall --methods gdpo --seeds 0 1 2 3 4 5 6 7 8 9 --group-size 4 --set steps=1 --set eval_every=1
        --evaluate)
# the denser regime's screen: step-0 density only, its one criterion (no evaluation)
DENSE_SCREEN=(--target toolcall --methods gdpo --seeds 0 1 2 3 4 5 6 7 8 9 --group-size 4 --set steps=1 --set eval_every=1)
TOOL=(--target toolcall --methods shuffled gdpo --seeds 0 1 2 3 4 --group-size 4 --crossing format=0.8 --evaluate)
TOOL3=(--target three_rewards --methods shuffled gdpo --seeds 0 1 2 3 4 --group-size 4 --crossing format=0.8
       --evaluate)
# the math task (issue "Math in the paper's regime"): GDPO and the drift control only, 5 seeds, one warm start each,
# the paper's stable 0.99 length crossing (window 10, held 20). The settings are stated in full: they ran against
# tiny.yaml's math settings of 6215b7f (1e-4, 1,600 SFT steps), since replaced by the chosen ones.
# Their batch was 96 responses a step, stated too since tiny.yaml's math task moved to 192 (the math62b pilots).
MATH=(--target math_length --methods gdpo shuffled --seeds 0 1 2 3 4 --group-size 8 --crossing length=0.8
      --crossing length=0.95 --stable length=0.99 --evaluate --option slip_rate=0.4 --option hard_sum=14
      --option hard_concise_rate=0.03 --set responses_per_step=96)
{
  for rate in 0.02 0.015 0.012; do
    pilot "screen-fr$rate" "${SCREEN[@]}" --option format_rate=$rate
  done
  # the denser regime's task (toolcall_dense): the rate whose step-0 format density is nearest 0.25, the only criterion
  for rate in 0.06 0.08 0.09 0.1; do
    pilot "screen-dense-fr$rate" "${DENSE_SCREEN[@]}" --option format_rate=$rate
  done
  for config in 1.5e-4:0:30 1.5e-4:0.1:30 2e-4:0.1:30 3e-4:0.1:30 3e-4:0.2:30 2e-4:0.1:40 2e-4:0.2:40 3e-4:0.2:40; do
    IFS=: read -r lr kl steps <<< "$config"
    name="tc-fr012-lr$lr-kl$kl-s$steps"
    share_warm_start screen-fr0.012 "$name"
    pilot "$name" "${TOOL[@]}" --option format_rate=0.012 --set learning_rate=$lr --set kl_coef=$kl \
      --set steps=$steps --set eval_every=$steps
  done
} &
tool_pilots=$!
{
  pilot tc3-fr012-lr1.5e-4-kl0 "${TOOL3[@]}" --option format_rate=0.012 --set learning_rate=1.5e-4 --set kl_coef=0
  for config in 1.5e-4:0.1 2e-4:0.1; do
    lr=${config%%:*}; kl=${config#*:}
    share_warm_start tc3-fr012-lr1.5e-4-kl0 "tc3-fr012-lr$lr-kl$kl"
    pilot "tc3-fr012-lr$lr-kl$kl" "${TOOL3[@]}" --option format_rate=0.012 --set learning_rate=$lr --set kl_coef=$kl
  done
  # (name, steps, checkpoint every, learning rate, KL, SFT steps, extra options); the chosen one is
  # sft3000-lr2e-4-kl0.03-s80.
  # kl0.2, lr2e-4-kl0.05-s80 and hs16-lr1.5e-4-kl0.05-s80 were stopped early when first run (their GDPO seeds had
  # shown what they were for); a rerun completes them.
  while read -r name steps every lr kl sft extra; do
    # shellcheck disable=SC2086  # extra holds zero or more --option flags
    pilot "math62-slip0.4-$name" "${MATH[@]}" --set steps="$steps" --set eval_every="$every" \
      --set learning_rate="$lr" --set kl_coef="$kl" --warm sft_steps="$sft" $extra < /dev/null
  done <<'PILOTS'
kl0.2 60 60 1e-4 0.2 1600
kl0.05 60 60 1e-4 0.05 1600
lr2e-4-kl0.05 60 60 2e-4 0.05 1600
lr2e-4-kl0.02 60 60 2e-4 0.02 1600
hc0.1-lr2e-4-kl0.05 60 60 2e-4 0.05 1600 --option hard_concise_rate=0.1
lr2e-4-kl0.05-s80 80 80 2e-4 0.05 1600
hs16-lr1.5e-4-kl0.05-s80 80 20 1.5e-4 0.05 1600 --option hard_sum=16
lr1e-4-kl0.03-s80 80 20 1e-4 0.03 1600
sft3000-lr2e-4-kl0.05-s80 80 80 2e-4 0.05 3000
sft3000-hs16-lr2e-4-kl0.05-s80 80 20 2e-4 0.05 3000 --option hard_sum=16
sft3000-lr2e-4-kl0.03-s80 80 20 2e-4 0.03 3000
PILOTS
  # The drift control at the chosen setting lost 10-19 points: a larger batch at a lower rate (criteria fixed
  # before these ran: docs/calibration/math62b-criteria.md). The chosen one is b192-lr1.4e-4. They share the
  # 3,000-step warm start of the pilot above; b96 repeats that pilot's settings under the name the criteria use (a
  # pilot reuses runs only from its own folder, so its ten short runs are trained again).
  for config in 96:2e-4 192:1.4e-4 384:1e-4; do
    batch=${config%%:*}; lr=${config#*:}
    share_warm_start math62-slip0.4-sft3000-lr2e-4-kl0.03-s80 "math62b-b$batch-lr$lr"
    pilot "math62b-b$batch-lr$lr" "${MATH[@]}" --set steps=80 --set eval_every=20 --set learning_rate="$lr" \
      --set kl_coef=0.03 --warm sft_steps=3000 --set responses_per_step="$batch"
  done
} &
other_pilots=$!
status=0
wait "$tool_pilots" || status=$?
wait "$other_pilots" || status=$?
if [ "$status" -ne 0 ]; then
  echo "a pilot failed (its log: $OUT/<name>.log)" >&2
  exit "$status"
fi
"$PY" -m dara.pilot --summarise docs/calibration/*/pilot.csv --out docs/calibration/summary.md
# the math task on the study's five warm starts (docs/calibration/math62c-criteria.md), through the workflow
PYTHON="$PY" experiments/calibration/math62c.sh
