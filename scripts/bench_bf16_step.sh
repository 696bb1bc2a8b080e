#!/usr/bin/env bash
# The bf16 training step against PyTorch's: zoff train (the C++ gpt, bf16, ZeRO stage 2,
# 2 ranks) beside the same GPT in Python (examples/python/gpt.py) under
# DistributedDataParallel + torch.autocast("cpu", bfloat16) on gloo, alternating ROUNDS times
# in one run, same shapes (global batch 16 windows of the preset's context). Prints each
# round, the median tokens/s of each, their ratio, where each step's time goes (zoff's
# wall_clock_breakdown beside the same phases timed around DDP's calls: no profiler, so no
# distortion), and (PROFILE=1) a per-op profile of each side to $OUT/{zoff,ddp}_profile.txt.
# Modes: zoff (its default transport: shared memory, the ranks sharing this host), zoff_gloo
# (ZOFF_COMM_TRANSPORT=gloo: Gloo's TCP loopback, as before the shared-memory transport),
# zoff_stage0 / zoff_stage1 (the same config at ZeRO stage 0 or 1: where the stage's own cost
# shows), ddp (bf16 autocast), ddp_fp32 (DDP in fp32, no autocast).
# Env: ZOFF_BUILD_DIR (build), PRESET (small), STEPS (30), ROUNDS (2), PROFILE (0),
#      MODES ("zoff ddp"; e.g. "zoff zoff_gloo zoff_stage0 ddp"), OUT (runs/bench_bf16_step),
#      CONFIG (examples/configs/gpt_${PRESET}_bf16_stage2.json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/zoff_vs_ddp_rounds.sh
BUILD_DIR="${ZOFF_BUILD_DIR:-build}"
ZOFF="$BUILD_DIR/zoff"
source scripts/env.sh
PY="$ZOFF_PY"  # the venv with the pinned torch (scripts/setup.sh)
PRESET="${PRESET:-small}"
STEPS="${STEPS:-30}"
ROUNDS="${ROUNDS:-2}"
OUT="${OUT:-runs/bench_bf16_step}"
CONFIG="${CONFIG:-examples/configs/gpt_${PRESET}_bf16_stage2.json}"
WARMUP=5
mkdir -p "$OUT"
BATCH=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["train_batch_size"])' "$CONFIG")

# The config with wall_clock_breakdown on: zoff's log then has each step's phase times.
TIMED_CONFIG="$OUT/config_timed.json"
"$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); c["wall_clock_breakdown"]=True
json.dump(c, open(sys.argv[2], "w"))' "$CONFIG" "$TIMED_CONFIG"
# The same at stages 0 and 1, for the zoff_stage0 / zoff_stage1 modes.
for stage in 0 1; do
  "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1]))
c.setdefault("zero_optimization", {})["stage"]=int(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))' \
    "$TIMED_CONFIG" "$OUT/config_timed_stage$stage.json" "$stage"
done

zoff_round() {  # $1: round, $2: mode (zoff, zoff_gloo, zoff_stage0, zoff_stage1); prints one JSON line
  local mode="${2:-zoff}" transport=auto prof=() config="$TIMED_CONFIG"
  [[ "$mode" == zoff_gloo ]] && transport=gloo
  [[ "$mode" == zoff_stage[01] ]] && config="$OUT/config_timed_${mode#zoff_}.json"
  [[ "${PROFILE:-0}" == 1 && "$1" == 1 ]] && prof=(--profile "$OUT/${mode}_profile.txt" --profile-steps 5)
  local cmd=("$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt --preset "$PRESET" --seed 1
             --config "$config" --steps "$STEPS" --no-eval --log "$OUT/${mode}_$1.jsonl" "${prof[@]}")
  echo "+ ZOFF_COMM_TRANSPORT=$transport ${cmd[*]}" >&2
  ZOFF_COMM_TRANSPORT=$transport "${cmd[@]}" > "$OUT/${mode}_$1.out" 2>&1 \
    || { cat "$OUT/${mode}_$1.out" >&2; exit 1; }
  "$PY" - "$OUT/${mode}_$1.jsonl" "$WARMUP" "$mode" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"event"' not in l]
kept = rows[int(sys.argv[2]):]
tps = statistics.median(r["tokens_per_s"] for r in kept)
times = {k: statistics.median(r["times_ms"][k] for r in kept) for k in kept[0]["times_ms"]}
print(json.dumps({"mode": sys.argv[3], "tokens_per_s": tps, "steps": len(rows), "times_ms": times}))
PY
}

zoff_gloo_round() { zoff_round "$1" zoff_gloo; }
zoff_stage0_round() { zoff_round "$1" zoff_stage0; }
zoff_stage1_round() { zoff_round "$1" zoff_stage1; }

ddp_round() {  # $1: round, $2: mode (ddp: bf16 autocast; ddp_fp32: fp32); prints one JSON line
  local mode="${2:-ddp}" prof=()
  [[ "${PROFILE:-0}" == 1 && "$1" == 1 ]] && prof=(--profile "$OUT/ddp_profile.txt" --profile-steps 5)
  local cmd=(env PYTHONPATH="$PWD/$BUILD_DIR/python" "$ZOFF" launch -n 2 -- "$PY" scripts/bench_python.py --mode "$mode" --preset "$PRESET"
             --steps "$STEPS" --warmup "$WARMUP" --batch "$BATCH" "${prof[@]}")
  echo "+ ${cmd[*]}" >&2
  "${cmd[@]}" > "$OUT/${mode}_$1.out" 2>&1 || { cat "$OUT/${mode}_$1.out" >&2; exit 1; }
  sed -n 's/^\[rank 0\] //p' "$OUT/${mode}_$1.out" | grep '^{'
}
ddp_fp32_round() { ddp_round "$1" ddp_fp32; }

one_round() { "${1}_round" "$2"; }  # mode, round
alternate_rounds "$ROUNDS" one_round
if [[ "${PROFILE:-0}" == 1 ]]; then
  echo "profiles (round 1): $OUT/*_profile.txt"
fi
