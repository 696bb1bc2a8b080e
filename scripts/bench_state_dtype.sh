#!/usr/bin/env bash
# Accuracy of compressed optimizer states (issue 10): the same run with optimizer.state_dtype
# fp32, bf16 and int8. gpt small, bf16, 300 steps, one seed: the final loss is the mean of
# the last 10 steps' losses. cnn on Fashion-MNIST, 5 epochs (4685 steps of 64): the test
# accuracy at the end. Prints each against fp32 states. Not a timing: runs may share cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
OUT="${OUT:-runs/bench_state_dtype}"
PARTS="${PARTS:-gpt cnn}"
mkdir -p "$OUT"

# with_dtype BASE DTYPE: $OUT/BASE_DTYPE.json, examples/configs/BASE.json with the state dtype
with_dtype() {
  /usr/bin/python3 - "examples/configs/$1.json" "$OUT/$1_$2.json" "$2" <<'PY'
import json, sys
src, dst, dtype = sys.argv[1:]
c = json.load(open(src))
c["optimizer"]["state_dtype"] = dtype
json.dump(c, open(dst, "w"), indent=1)
PY
}

for dtype in fp32 bf16 int8; do
  if [[ " $PARTS " == *" gpt "* ]]; then
    with_dtype gpt_small_bf16_stage2 "$dtype"
    echo "\$ zoff train --model gpt --preset small --config $OUT/gpt_small_bf16_stage2_$dtype.json --steps 300 --seed 1"
    "$ZOFF" train --model gpt --preset small --config "$OUT/gpt_small_bf16_stage2_$dtype.json" \
      --steps 300 --seed 1 --eval-every 0 --log "$OUT/gpt_$dtype.jsonl" >"$OUT/gpt_$dtype.txt" 2>&1
  fi
  if [[ " $PARTS " == *" cnn "* ]]; then
    with_dtype cnn_stage2 "$dtype"
    echo "\$ zoff train --model cnn --config $OUT/cnn_stage2_$dtype.json --steps 4685 --seed 1"
    "$ZOFF" train --model cnn --config "$OUT/cnn_stage2_$dtype.json" --steps 4685 --seed 1 \
      --eval-every 0 --log "$OUT/cnn_$dtype.jsonl" >"$OUT/cnn_$dtype.txt" 2>&1
  fi
done

/usr/bin/python3 - "$OUT" "$PARTS" <<'PY'
import json, sys
out, parts = sys.argv[1], sys.argv[2].split()
def records(path):
    return [json.loads(l) for l in open(path) if l.strip()]
if "gpt" in parts:
    final = {}
    for d in ["fp32", "bf16", "int8"]:
        losses = [r["loss"] for r in records(f"{out}/gpt_{d}.jsonl") if "loss" in r]
        final[d] = sum(losses[-10:]) / 10
    for d in ["fp32", "bf16", "int8"]:
        print(f"gpt small bf16, 300 steps, {d} states: final loss {final[d]:.4f}"
              f" ({100 * (final[d] / final['fp32'] - 1):+.2f}% vs fp32 states)")
if "cnn" in parts:
    acc = {}
    for d in ["fp32", "bf16", "int8"]:
        evals = [r for r in records(f"{out}/cnn_{d}.jsonl") if r.get("event") == "eval"]
        acc[d] = 100 * evals[-1]["test_accuracy"]
    for d in ["fp32", "bf16", "int8"]:
        print(f"cnn Fashion-MNIST, 5 epochs, {d} states: test accuracy {acc[d]:.2f}%"
              f" ({acc[d] - acc['fp32']:+.2f} points vs fp32 states)")
PY
