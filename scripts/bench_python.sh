#!/usr/bin/env bash
# The Python GPT through zoff (bf16, ZeRO-2, cpu offload, 2 ranks) against DDP + AdamW under
# torch.autocast bf16 on gloo, alternating ROUNDS times in one run; prints the tokens/s ratio.
# Env: ZOFF_BUILD_DIR (build), PRESET (small), STEPS (30), BATCH (8), ROUNDS (2), RANKS (2).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
PY=/usr/bin/python3  # Debian's, the one with torch (PATH may hold another)
export PYTHONPATH="$PWD/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
ARGS=(--preset "${PRESET:-small}" --steps "${STEPS:-30}" --batch "${BATCH:-8}")
run() {
  "$BUILD_DIR/zoff" launch -n "${RANKS:-2}" -- "$PY" scripts/bench_python.py --mode "$1" "${ARGS[@]}" |
    sed -n 's/^\[rank 0\] //p' | grep '^{'
}
results=()
for round in $(seq "${ROUNDS:-2}"); do
  for mode in zoff ddp; do
    line=$(run "$mode")
    echo "round $round: $line"
    results+=("$line")
  done
done
printf '%s\n' "${results[@]}" | "$PY" -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin]
z, d = (statistics.median(r["tokens_per_s"] for r in rows if r["mode"] == m) for m in ("zoff", "ddp"))
print(f"tokens/s (median of rounds): zoff {z:,.0f}, ddp+autocast {d:,.0f}; ratio zoff/ddp = {z / d:.3f}")'
