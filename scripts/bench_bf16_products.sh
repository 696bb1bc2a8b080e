#!/usr/bin/env bash
# Benchmark: the same bf16 GPT run with LibTorch's bf16 GEMM ("native") and with zoff's
# widened products (fp32 GEMM, rounded once), in one invocation, ZeRO-2 + CPU offload on 2
# ranks. Prints tokens/s of each, the ratio, the losses' largest difference, and the
# commands. On CPUs with AVX512-BF16 or AMX, native is the automatic choice.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
PRESET="${PRESET:-tiny}"
STEPS="${STEPS:-30}"
OUT="${OUT:-runs/bench_bf16_products}"
mkdir -p "$OUT"
/usr/bin/python3 - "$OUT/config.json" <<'PY'
import json, sys
c = json.load(open("examples/configs/test_gpt_exact.json"))
c["bf16"] = {"enabled": True}
c["zero_optimization"]["stage"] = 2
c["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
for products in widened native; do
  cmd=(env "ZOFF_BF16_PRODUCTS=$products" "$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt
       --preset "$PRESET" --seed 1 --config "$OUT/config.json" --steps "$STEPS" --eval-every 0
       --log "$OUT/$products.jsonl")
  echo "+ ${cmd[*]}"
  "${cmd[@]}" > "$OUT/$products.out" 2>&1 || { cat "$OUT/$products.out"; exit 1; }
done
/usr/bin/python3 - "$OUT" "$STEPS" <<'PY'
import json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])
def load(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl") if '"event"' not in l]
w, n = load("widened"), load("native")
# Throughput: median over the steps after the first 3 (warm-up, page faults).
tw = statistics.median(r["tokens_per_s"] for r in w[3:])
tn = statistics.median(r["tokens_per_s"] for r in n[3:])
worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(w, n))
print(f"widened: {tw:9.0f} tokens/s   native: {tn:9.0f} tokens/s   widened/native: {tw / tn:.2f}x")
print(f"losses over {steps} steps: largest relative difference {worst:.3g}; "
      f"final {w[-1]['loss']:.4f} (widened) vs {n[-1]['loss']:.4f} (native)")
PY
