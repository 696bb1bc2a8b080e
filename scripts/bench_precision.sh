#!/usr/bin/env bash
# Benchmark: fp32, bf16 and fp16 (dynamic loss scaling; its products widened to fp32) tokens/s
# and final loss of the same GPT, same run, ZeRO-2 + CPU offload on 2 ranks. Prints the
# ratios, fp16's loss-scale history and the commands that produced them.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
PRESET="${PRESET:-small}"
STEPS="${STEPS:-300}"
OUT="${OUT:-runs/bench_precision}"
mkdir -p "$OUT"
for precision in fp32 bf16 fp16; do
  cmd=("$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt --preset "$PRESET" --seed 1
       --config "examples/configs/gpt_${PRESET}_${precision}_offload.json" --steps "$STEPS"
       --log "$OUT/$precision.jsonl")
  echo "+ ${cmd[*]}"
  "${cmd[@]}" > "$OUT/$precision.out" 2>&1 || { cat "$OUT/$precision.out"; exit 1; }
done
/usr/bin/python3 - "$OUT" "$STEPS" <<'PY'
import json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if '"event"' not in l]
    # Throughput: median over steps after the first 5 (warm-up, page faults).
    tps = statistics.median(r["tokens_per_s"] for r in rows[5:])
    # Final loss: mean of the last 10 steps (one step's batch is noisy).
    loss = statistics.mean(r["loss"] for r in rows[-10:])
    return tps, loss, rows[-1]["mem"]
f_tps, f_loss, f_mem = load("fp32")
b_tps, b_loss, b_mem = load("bf16")
print(f"fp32: {f_tps:9.0f} tokens/s  loss(last 10 of {steps}) {f_loss:.4f}")
print(f"bf16: {b_tps:9.0f} tokens/s  loss(last 10 of {steps}) {b_loss:.4f}")
print(f"bf16/fp32 tokens/s ratio: {b_tps / f_tps:.2f}x   loss difference: {100 * (b_loss - f_loss) / f_loss:+.2f}%")
print("bf16 mem per rank (bytes):", json.dumps({k: b_mem[k] for k in ("compute", "offload")}))
h_tps, h_loss, _ = load("fp16")
print(f"fp16: {h_tps:9.0f} tokens/s  loss(last 10 of {steps}) {h_loss:.4f}")
print(f"fp16/bf16 tokens/s ratio: {h_tps / b_tps:.2f}x   fp16/fp32: {h_tps / f_tps:.2f}x   "
      f"loss difference fp16 vs bf16: {100 * (h_loss - b_loss) / b_loss:+.2f}%")
rows = [json.loads(l) for l in open(f"{out}/fp16.jsonl") if '"event"' not in l]
history, skipped = [], [r["step"] for r in rows if r.get("skipped")]
for r in rows:
    if not history or r["loss_scale"] != history[-1][1]:
        history.append((r["step"], r["loss_scale"]))
print("fp16 loss scale (step: scale from then on):", ", ".join(f"{s}: {v:g}" for s, v in history))
print(f"fp16 skipped steps (overflow): {len(skipped)} {skipped[:20]}")
PY
