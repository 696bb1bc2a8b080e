#!/usr/bin/env bash
# The Python GPT through zoff (bf16, ZeRO-2, cpu offload, 2 ranks) against DDP + AdamW under
# torch.autocast bf16 on gloo, alternating ROUNDS times in one run; prints the tokens/s ratio
# and where each step goes on each side (ms per phase, rank 0). Modes: zoff (its default
# transport: shared memory on one host), zoff_gloo (ZOFF_COMM_TRANSPORT=gloo), ddp.
# Env: ZOFF_BUILD_DIR (build), PRESET (small), STEPS (30), BATCH (8), ROUNDS (2), RANKS (2),
#      MODES ("zoff ddp"; e.g. "zoff zoff_gloo ddp").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/zoff_vs_ddp_rounds.sh
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
PY=/usr/bin/python3  # Debian's, the one with torch (PATH may hold another)
export PYTHONPATH="$PWD/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
ARGS=(--preset "${PRESET:-small}" --steps "${STEPS:-30}" --batch "${BATCH:-8}")
run() {  # $1: mode
  local mode="$1" transport=auto
  [[ "$mode" == zoff_gloo ]] && { mode=zoff; transport=gloo; }
  ZOFF_COMM_TRANSPORT=$transport "$BUILD_DIR/zoff" launch -n "${RANKS:-2}" -- \
    "$PY" scripts/bench_python.py --mode "$mode" "${ARGS[@]}" |
    sed -n 's/^\[rank 0\] //p' | grep '^{' | sed "s/\"mode\": \"$mode\"/\"mode\": \"$1\"/"
}
one_round() { run "$1"; }  # mode (the round number is not needed)
alternate_rounds "${ROUNDS:-2}" one_round
