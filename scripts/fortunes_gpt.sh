#!/usr/bin/env bash
# The README's example: trains gpt small (14.4M parameters, context 256) on Debian's fortunes
# with 2 ranks, ZeRO-2 and the optimizer offloaded to host memory (bf16), evaluating on the
# held-out split every 500 steps, then writes text from the checkpoint. ~45 min on 2 cores.
#   bash scripts/fortunes_gpt.sh [STEPS]   (default 6000: the config's cosine schedule)
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
RUN_DIR="${ZOFF_RUN_DIR:-runs/fortunes_small}"
STEPS="${1:-6000}"
[[ -x "$ZOFF" ]] || { echo "fortunes_gpt.sh: $ZOFF is missing: run bash scripts/build.sh" >&2; exit 2; }
mkdir -p "$RUN_DIR"
rm -f "$RUN_DIR/log.jsonl"

"$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt --preset small \
  --config examples/configs/gpt_small_fortunes.json --steps "$STEPS" --seed 1 \
  --log "$RUN_DIR/log.jsonl" --eval-every 500 --save "$RUN_DIR/checkpoint" --save-every 1000

"$ZOFF" generate --checkpoint "$RUN_DIR/checkpoint" --prompt "Q: What is the meaning of life?
A:" --tokens 400 --seed 1
"$ZOFF" report "$RUN_DIR/log.jsonl" --out "$RUN_DIR/report.html"
echo "checkpoint: $RUN_DIR/checkpoint   report: $RUN_DIR/report.html"
