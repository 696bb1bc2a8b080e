#!/usr/bin/env bash
# Benchmark of ZeRO stage 3 against stage 2, same run: tokens/s on gpt small (2 ranks, bf16)
# and peak RSS per rank on gpt medium (2 ranks, bf16), with and without activation
# checkpointing. Prints the ratios and the commands that produced them. Run it alone: the
# machine has 2 cores and its memory bandwidth swings, so the runs alternate.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
STEPS="${STEPS:-30}"
RSS_STEPS="${RSS_STEPS:-3}"
ROUNDS="${ROUNDS:-2}"
OUT="${OUT:-runs/bench_stage3}"
mkdir -p "$OUT"
run() {  # run TAG ARGS...: one `zoff train` on 2 ranks under /usr/bin/time -v
  local tag=$1; shift
  local cmd=(/usr/bin/time -v "$ZOFF" launch -n 2 -- "$ZOFF" train --model gpt --seed 1 "$@")
  echo "+ ${cmd[*]}"
  "${cmd[@]}" > "$OUT/$tag.out" 2> "$OUT/$tag.time" || { cat "$OUT/$tag.out" "$OUT/$tag.time"; exit 1; }
}
for round in $(seq 1 "$ROUNDS"); do
  for st in 2 3; do
    run "small_s${st}_r$round" --preset small --config "examples/configs/gpt_small_bf16_stage$st.json" \
      --steps "$STEPS" --log "$OUT/small_s${st}_r$round.jsonl"
  done
done
for variant in s2 s3 s2_ckpt s3_ckpt; do
  st=${variant:1:1}
  extra=()
  [[ $variant == *ckpt ]] && extra=(--activation-checkpointing)
  run "medium_$variant" --preset medium --config "examples/configs/gpt_medium_bf16_stage$st.json" \
    --steps "$RSS_STEPS" --log "$OUT/medium_$variant.jsonl" "${extra[@]}"
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def tps(tag):
    rows = [json.loads(l) for l in open(f"{out}/{tag}.jsonl") if '"event"' not in l]
    return statistics.median(r["tokens_per_s"] for r in rows[5:])  # after warm-up
def rss_gib(tag):  # the largest rank's peak RSS (time -v reports the largest child)
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{out}/{tag}.time").read())[1])
    return kb / 2**20
def mem(tag):
    rows = [json.loads(l) for l in open(f"{out}/{tag}.jsonl") if '"event"' not in l]
    return rows[-1]["mem"]
ratios = []
for r in range(1, rounds + 1):
    s2, s3 = tps(f"small_s2_r{r}"), tps(f"small_s3_r{r}")
    ratios.append(s3 / s2)
    print(f"gpt small round {r}: stage 2 {s2:8.0f} tokens/s, stage 3 {s3:8.0f} tokens/s, ratio {s3 / s2:.3f}")
print(f"gpt small, 2 ranks, bf16: stage 3 / stage 2 tokens/s = {statistics.median(ratios):.3f} (median of {rounds} alternating rounds)")
for v in ("s2", "s3", "s2_ckpt", "s3_ckpt"):
    m = mem(f"medium_{v}")
    print(f"gpt medium, 2 ranks, bf16, {v:8s}: peak RSS {rss_gib('medium_' + v):6.2f} GiB per rank;"
          f" model states {(m['compute']['params'] + m['compute']['grads'] + m['compute']['master'] + m['compute']['optim']) / 2**30:6.2f} GiB")
PY
