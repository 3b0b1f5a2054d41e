#!/usr/bin/env bash
# Does the trainer's minibatch layout change how fast math length is learned? (docs/tiny_scale.md, criterion 4)
#
# 6cea2fa made the tiny trainer's PPO minibatches hold whole prompt groups (each prompt's forward computed once for its
# G responses); before it, 9b9b1b0's minibatches mixed responses of different prompts. Nothing else that trains changed
# in that step (git diff 9b9b1b0 6cea2fa -- src experiments: policy.py and trainer.py only). The snapshot after the
# change learned math length a little later than the one before, on the same seeds 0-9, which one run of each cannot
# tell from a new draw. This A/B trains the math claims' methods on ten fresh seeds (10-19, in neither snapshot) at
# both revisions, with the math_length target's settings, and compares them by the rule stated in
# minibatch_layout.py (fixed before these runs). About 10 minutes on 2 cores (the two revisions run side
# by side).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
OUT=results/pilots/minibatch-layout
BEFORE=9b9b1b0  # the last revision whose minibatches mix responses of different prompts
ARGS=(--target math_length --methods gdpo dara_sym dara_asym --seeds 10 11 12 13 14 15 16 17 18 19 --group-size 8
      --crossing length=0.8)
mkdir -p "$OUT"
# The earlier trainer runs from a worktree of its revision (its run provenance then records that revision); the worktree
# goes, and a background arm is stopped, however the script ends.
WORKTREE="$OUT/src-$BEFORE"
before=
cleanup() {
  if [ -n "$before" ]; then kill "$before" 2> /dev/null || true; fi
  git worktree remove --force "$WORKTREE" 2> /dev/null || true
}
trap cleanup EXIT
git worktree prune  # forget a worktree whose folder was deleted with results/
if [ ! -d "$WORKTREE" ]; then
  git worktree add --detach "$WORKTREE" "$BEFORE" > /dev/null
fi
if [ "$(git -C "$WORKTREE" rev-parse HEAD)" != "$(git rev-parse "$BEFORE^{commit}")" ]; then
  echo "$WORKTREE is not at $BEFORE; delete it and rerun" >&2
  exit 1
fi
# the two arms side by side: the earlier trainer in the background, the current one in the foreground
PYTHONPATH="$PWD/$WORKTREE/src" "$PY" -m dara.pilot --out "$OUT/responses" "${ARGS[@]}" > "$OUT/responses.log" 2>&1 &
before=$!
if ! "$PY" -m dara.pilot --out "$OUT/groups" "${ARGS[@]}" > "$OUT/groups.log" 2>&1; then
  echo "the current trainer's arm failed (its log: $OUT/groups.log)" >&2
  exit 1
fi
wait "$before" || { before=; echo "$BEFORE's arm failed (its log: $OUT/responses.log)" >&2; exit 1; }
before=
"$PY" experiments/calibration/minibatch_layout.py "$OUT" docs/calibration/minibatch-layout
