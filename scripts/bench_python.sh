#!/usr/bin/env bash
# The Python GPT through zoff (bf16, ZeRO-2, cpu offload, 2 ranks) against DDP + AdamW under
# torch.autocast bf16 on gloo, alternating ROUNDS times in one run; prints the tokens/s ratio
# and where each step goes on each side (ms per phase, rank 0). Modes: zoff (its default
# transport: shared memory on one host), zoff_gloo (ZOFF_COMM_TRANSPORT=gloo), ddp.
# Env: ZOFF_BUILD_DIR (build), PRESET (small), STEPS (30), BATCH (8), ROUNDS (2), RANKS (2),
#      OFFLOAD (cpu; none: zoff's offload_optimizer.device, which on a CPU-only host moves
#      nothing: both keep the states in the same RAM),
#      MODES ("zoff ddp"; e.g. "zoff zoff_gloo ddp"), PROFILE (0; 1: round 1 of each mode
#      also writes rank 0's per-op profile of 5 steps after the warm-up, zoff.OpProfile, to
#      $OUT/<mode>_profile.txt), OUT (runs/bench_python).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/zoff_vs_ddp_rounds.sh
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
source scripts/env.sh
PY="$ZOFF_PY"  # the venv with the pinned torch (scripts/setup.sh)
export PYTHONPATH="$PWD/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
ARGS=(--preset "${PRESET:-small}" --steps "${STEPS:-30}" --batch "${BATCH:-8}")
OUT="${OUT:-runs/bench_python}"
run() {  # $1: mode, $2: round
  local mode="$1" transport=auto prof=() offload=()
  [[ "$mode" == zoff_gloo ]] && { mode=zoff; transport=gloo; }
  [[ "$mode" == zoff ]] && offload=(--offload "${OFFLOAD:-cpu}")
  if [[ "${PROFILE:-0}" == 1 && "$2" == 1 ]]; then
    mkdir -p "$OUT"
    prof=(--profile "$OUT/$1_profile.txt" --profile-steps 5)
  fi
  ZOFF_COMM_TRANSPORT=$transport "$BUILD_DIR/zoff" launch -n "${RANKS:-2}" -- \
    "$PY" scripts/bench_python.py --mode "$mode" "${ARGS[@]}" "${offload[@]}" "${prof[@]}" |
    sed -n 's/^\[rank 0\] //p' | grep '^{' | sed "s/\"mode\": \"$mode\"/\"mode\": \"$1\"/"
}
one_round() { run "$1" "$2"; }  # mode, round
alternate_rounds "${ROUNDS:-2}" one_round
if [[ "${PROFILE:-0}" == 1 ]]; then
  echo "profiles (round 1): $OUT/*_profile.txt"
fi
