#!/usr/bin/env bash
# Two zoff binaries side by side, for a change that must not change speed (a refactor): the
# bf16 step (gpt small, ZeRO stage 2, 2 ranks, cpu offload), the NVMe step (gpt small, stage
# 3, master, states and parameters on disk, 1 rank) and `zoff bench optim`, alternating
# A B B A ... ROUNDS times in one run (this VM's bandwidth swings ~2x within minutes: only
# figures from the same run compare). Prints each round's median tokens/s (steps after
# WARMUP) and B/A per workload, and checks that both binaries log the same losses.
# Usage: scripts/bench_ab.sh OLD_ZOFF NEW_ZOFF
# Env: STEPS (14), WARMUP (4), ROUNDS (2), OUT (runs/bench_ab), NVME (/var/tmp/zoff_bench_ab),
# WORKLOADS ("bf16 nvme optim": a subset reruns one workload for more rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -eq 2 && -x "$1" && -x "$2" ]] || { echo "usage: $0 OLD_ZOFF NEW_ZOFF (both executable)" >&2; exit 2; }
A="$1"
B="$2"
STEPS="${STEPS:-14}"
WARMUP="${WARMUP:-4}"
ROUNDS="${ROUNDS:-2}"
WORKLOADS="${WORKLOADS:-bf16 nvme optim}"
OUT="${OUT:-runs/bench_ab}"
NVME="${NVME:-/var/tmp/zoff_bench_ab}"
mkdir -p "$OUT" "$NVME"
trap 'rm -rf "$NVME"' EXIT

/usr/bin/python3 - "$OUT" "$NVME" <<'PY'
import json, sys
out, nvme = sys.argv[1:]
base = json.load(open("examples/configs/gpt_small_bf16_offload.json"))
base["zero_optimization"]["stage"] = 2
json.dump(base, open(f"{out}/bf16.json", "w"))
disk = json.load(open("examples/configs/gpt_small_bf16_nvme.json"))
disk["zero_optimization"]["offload_optimizer"]["nvme_path"] = nvme
disk["zero_optimization"]["offload_param"]["nvme_path"] = nvme
json.dump(disk, open(f"{out}/nvme.json", "w"))
PY

# run BIN NAME TAG: one workload with one binary, its log in $OUT/NAME_TAG.jsonl
run() {
  local bin="$1" name="$2" tag="$3" log="$OUT/$2_$3.jsonl"
  case "$name" in
    bf16) "$bin" launch -n 2 -- "$bin" train --model gpt --preset small --seed 1 --no-eval \
            --config "$OUT/bf16.json" --steps "$STEPS" --log "$log" > "$OUT/${name}_$tag.out" 2>&1 ;;
    nvme) "$bin" train --model gpt --preset small --seed 1 --no-eval --threads 2 \
            --config "$OUT/nvme.json" --steps "$STEPS" --log "$log" > "$OUT/${name}_$tag.out" 2>&1 ;;
    optim) "$bin" bench optim --params 10000000 --repeats 3 --threads 2 --json > "$OUT/optim_$tag.json" ;;
  esac
}

for round in $(seq 1 "$ROUNDS"); do
  order="A B"
  (( round % 2 == 0 )) && order="B A"
  for who in $order; do
    bin="$A"; [[ $who == B ]] && bin="$B"
    for name in $WORKLOADS; do
      echo "round $round: $who $name" >&2
      run "$bin" "$name" "${who}${round}"
    done
  done
done

/usr/bin/python3 - "$OUT" "$ROUNDS" "$WARMUP" "$A" "$B" "$WORKLOADS" <<'PY'
import json, statistics, sys
out, rounds, warmup, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
workloads = sys.argv[6].split()
def steps(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [r for r in rows if "loss" in r and "step" in r]
def tokens(path):
    rows = steps(path)[warmup:]
    return statistics.median(r["tokens_per_s"] for r in rows)
def losses(path):
    return [r["loss"] for r in steps(path)]
print(f"A = {a}\nB = {b}")
for name in [w for w in ("bf16", "nvme") if w in workloads]:
    ratios = []
    for r in range(1, rounds + 1):
        ta, tb = tokens(f"{out}/{name}_A{r}.jsonl"), tokens(f"{out}/{name}_B{r}.jsonl")
        ratios.append(tb / ta)
        same = losses(f"{out}/{name}_A{r}.jsonl") == losses(f"{out}/{name}_B{r}.jsonl")
        print(f"{name} round {r}: A {ta:,.0f} tokens/s, B {tb:,.0f} tokens/s, B/A {tb/ta:.3f}, "
              f"losses {'identical' if same else 'DIFFER'}")
    print(f"{name}: B/A median {statistics.median(ratios):.3f}")
for kernel in ("adamw", "adamw_bf16_out") if "optim" in workloads else ():
    ratios = []
    for r in range(1, rounds + 1):
        pa = json.load(open(f"{out}/optim_A{r}.json"))["zoff"][kernel]
        pb = json.load(open(f"{out}/optim_B{r}.json"))["zoff"][kernel]
        ratios.append(pb / pa)
        print(f"bench optim {kernel} round {r}: A {pa/1e6:,.0f} M params/s, B {pb/1e6:,.0f}, B/A {pb/pa:.3f}")
    print(f"bench optim {kernel}: B/A median {statistics.median(ratios):.3f}")
PY
