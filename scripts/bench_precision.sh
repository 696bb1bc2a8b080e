#!/usr/bin/env bash
# Benchmark: fp32, bf16 and fp16 (dynamic loss scaling; its products widened to fp32) tokens/s
# and final loss of the same GPT, same run, ZeRO-2 + CPU offload on 2 ranks. Prints the
# ratios, fp16's loss-scale history and the commands that produced them.
#   PRECISIONS  which runs (default "fp32 bf16 fp16"; "bf16 fp16" for the fp16-vs-bf16 check)
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
PRESET="${PRESET:-small}"
STEPS="${STEPS:-300}"
OUT="${OUT:-runs/bench_precision}"
mkdir -p "$OUT"
PRECISIONS="${PRECISIONS:-fp32 bf16 fp16}"
for precision in $PRECISIONS; do
  cmd=("$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt --preset "$PRESET" --seed 1
       --config "examples/configs/gpt_${PRESET}_${precision}_offload.json" --steps "$STEPS"
       --log "$OUT/$precision.jsonl")
  echo "+ ${cmd[*]}"
  "${cmd[@]}" > "$OUT/$precision.out" 2>&1 || { cat "$OUT/$precision.out"; exit 1; }
done
/usr/bin/python3 - "$OUT" "$STEPS" "$PRECISIONS" <<'PY'
import json, statistics, sys
out, steps, ran = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if '"event"' not in l]
    # Throughput: median over steps after the first 5 (warm-up, page faults).
    tps = statistics.median(r["tokens_per_s"] for r in rows[5:])
    # Final loss: mean of the last 10 steps (one step's batch is noisy).
    loss = statistics.mean(r["loss"] for r in rows[-10:])
    return tps, loss, rows[-1]["mem"]
got = {name: load(name) for name in ran}
for name, (tps, loss, _) in got.items():
    print(f"{name}: {tps:9.0f} tokens/s  loss(last 10 of {steps}) {loss:.4f}")
def compare(a, b):
    if a in got and b in got:
        (a_tps, a_loss, _), (b_tps, b_loss, _) = got[a], got[b]
        print(f"{a}/{b} tokens/s ratio: {a_tps / b_tps:.2f}x   "
              f"loss difference {a} vs {b}: {100 * (a_loss - b_loss) / b_loss:+.2f}%")
compare("bf16", "fp32")
compare("fp16", "bf16")
compare("fp16", "fp32")
if "bf16" in got:
    print("bf16 mem per rank (bytes):", json.dumps({k: got["bf16"][2][k] for k in ("compute", "offload")}))
if "fp16" not in got:
    sys.exit(0)
rows = [json.loads(l) for l in open(f"{out}/fp16.jsonl") if '"event"' not in l]
history, skipped = [], [r["step"] for r in rows if r.get("skipped")]
for r in rows:
    if not history or r["loss_scale"] != history[-1][1]:
        history.append((r["step"], r["loss_scale"]))
print("fp16 loss scale (step: scale from then on):", ", ".join(f"{s}: {v:g}" for s, v in history))
print(f"fp16 skipped steps (overflow): {len(skipped)} {skipped[:20]}")
PY
