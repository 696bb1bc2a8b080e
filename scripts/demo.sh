#!/usr/bin/env bash
# The main job: installs what is missing, builds, and trains the tiny GPT on Debian's
# fortunes with 2 ranks and ZeRO stage 2, then prints generated text, a report and a checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target zoff
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
RUN_DIR="${ZOFF_RUN_DIR:-runs/demo}"
STEPS="${ZOFF_DEMO_STEPS:-500}"
mkdir -p "$RUN_DIR"
rm -f "$RUN_DIR/log.jsonl"

"$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt --preset tiny \
  --config examples/configs/gpt_tiny_stage2.json --steps "$STEPS" --seed 1 \
  --log "$RUN_DIR/log.jsonl" --save "$RUN_DIR/checkpoint" --save-every 250 \
  --sample "Q: What is the meaning of life?
A:" --sample-tokens 300

"$ZOFF" report "$RUN_DIR/log.jsonl" --out "$RUN_DIR/report.html"
echo
echo "checkpoint: $RUN_DIR/checkpoint   (zoff generate --checkpoint $RUN_DIR/checkpoint --prompt 'Q: ')"
echo "report:     $RUN_DIR/report.html"
echo "log:        $RUN_DIR/log.jsonl"
