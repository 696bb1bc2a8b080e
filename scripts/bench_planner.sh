#!/usr/bin/env bash
# The planner against the runs it plans (issue 11): gpt PRESETS (small, medium, xl) trained STEPS
# steps at stage 3, bf16, int8 states, everything on disk (the config of
# scripts/bench_beyond_ram.sh), each under /usr/bin/time -v; and the 6.7b run of
# bench_beyond_ram.sh (run that first). For each: `zoff estimate --plan` with the same
# config and flags, its peak host memory against the measured peak RSS (the largest of
# time -v and the step log's peak_rss) and its disk bytes against the log's mem.nvme.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="$(pwd)/${ZOFF_BUILD_DIR:-build}/zoff"
STEPS="${STEPS:-3}"
CONTEXT="${CONTEXT:-1024}"
DIR="${DIR:-/var/tmp/zoff_bench_planner}"
OUT="${OUT:-runs/bench_planner}"
BEYOND="${BEYOND:-runs/bench_beyond_ram}"
PRESETS="${PRESETS:-small medium xl}"  # gpt presets trained, each at CONTEXT
mkdir -p "$OUT" "$DIR/nvme"
/usr/bin/python3 - "$OUT" "$DIR/nvme" <<'PY'
import json, sys
out, nvme = sys.argv[1:]
json.dump({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
           "optimizer": {"type": "AdamW", "state_dtype": "int8", "params": {"lr": 3e-7}},
           "bf16": {"enabled": True},
           "zero_optimization": {
               "stage": 3, "sub_group_size": 10000000, "reduce_bucket_size": 100000000,
               "offload_optimizer": {"device": "nvme", "nvme_path": nvme, "gradients": "stream"},
               "offload_param": {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 250000000}}},
          open(f"{out}/config.json", "w"), indent=1)
PY
for preset in $PRESETS; do
  ctx=$CONTEXT
  cmd=("$ZOFF" train --model gpt --preset "$preset" --context "$ctx" --config "$OUT/config.json"
       --steps "$STEPS" --threads 2 --no-eval --seed 1 --log "$OUT/$preset.jsonl")
  echo "\$ ${cmd[*]}"
  /usr/bin/time -v "${cmd[@]}" >"$OUT/$preset.txt" 2>"$OUT/$preset.time"
  "$ZOFF" estimate --plan --json --config "$OUT/config.json" --model gpt --preset "$preset" \
    --context "$ctx" >"$OUT/$preset.plan.json"
  "$ZOFF" estimate --plan --config "$OUT/config.json" --model gpt --preset "$preset" \
    --context "$ctx" >"$OUT/$preset.plan.txt"
done
if [[ -f $BEYOND/zoff.json ]]; then
  "$ZOFF" estimate --plan --json --config "$BEYOND/zoff.json" --model gpt --preset 6.7b \
    --context "$CONTEXT" >"$OUT/6.7b.plan.json"
  "$ZOFF" estimate --plan --config "$BEYOND/zoff.json" --model gpt --preset 6.7b \
    --context "$CONTEXT" >"$OUT/6.7b.plan.txt"
fi
/usr/bin/python3 - "$OUT" "$BEYOND" "$PRESETS" <<'PY'
import json, os, re, sys
out, beyond, presets = sys.argv[1:]
def measured(log, time):
    rows = [json.loads(l) for l in open(log) if '"event"' not in l]
    kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(time).read())[1])
    rss = max([kb * 1024] + [r["peak_rss"] for r in rows])
    return rss, rows[-1]["mem"]["nvme"]["total"]
runs = [(p, f"{out}/{p}.jsonl", f"{out}/{p}.time", f"{out}/{p}.plan.json") for p in presets.split()]
if os.path.exists(f"{out}/6.7b.plan.json"):
    runs.append(("6.7b", f"{beyond}/zoff.jsonl", f"{beyond}/zoff.time", f"{out}/6.7b.plan.json"))
print("| gpt | planned peak RSS | measured | planned / measured | planned disk | measured (mem.nvme) | ratio |")
print("|---|---|---|---|---|---|---|")
for name, log, time, plan in runs:
    rss, disk = measured(log, time)
    p = json.load(open(plan))
    print(f"| {name} | {p['host_bytes'] / 1e9:.3f} GB | {rss / 1e9:.3f} GB | {p['host_bytes'] / rss:.3f} |"
          f" {p['disk_bytes'] / 1e9:.3f} GB | {disk / 1e9:.3f} GB | {p['disk_bytes'] / disk:.4f} |")
PY
