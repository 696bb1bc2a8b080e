#!/usr/bin/env bash
# Beyond RAM (issue 11): the largest gpt zoff trains on this machine against the largest
# plain LibTorch trains, same script, same context, batch and activation checkpointing:
# by default batch 1, context 1024, no checkpointing (the ZeRO-Offload paper's setting);
# CKPT=1 recomputes blocks in both (less activation memory for both).
#  1. zoff: gpt PRESET (6.7b: 6.45B parameters) for STEPS steps at stage 3, bf16, int8
#     optimizer states, with the fp32 master, the states and the bf16 parameters in files
#     under DIR and the gradients streamed into the step (no gradient shard anywhere);
#     saves the model (bf16 safetensors) at the end. Peak RSS by /usr/bin/time -v, disk
#     bytes by du every 10 s, s/step and tokens/s from the step log.
#  2. zoff generate on that model file, weights streamed from disk, peak RSS.
#  3. plain LibTorch (zoff train --reference: torch::optim::AdamW, fp32) on gpt xl's width
#     with more and more blocks (--layers) until the kernel's OOM killer stops it; the
#     largest that trains STEPS steps is the baseline.
# Run it alone: nothing else on the cores or the disk. Disk: ~65 GB under DIR for 6.7b.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="$(pwd)/${ZOFF_BUILD_DIR:-build}/zoff"
PRESET="${PRESET:-6.7b}"
CONTEXT="${CONTEXT:-1024}"
CKPT="${CKPT:-0}"
STEPS="${STEPS:-3}"
DIR="${DIR:-/var/tmp/zoff_beyond_ram}"
OUT="${OUT:-runs/bench_beyond_ram}"
SKIP_ZOFF="${SKIP_ZOFF:-0}"
SKIP_PLAIN="${SKIP_PLAIN:-0}"
# LAYERS: blocks of PRESET's width instead of its own (e.g. 13b with 36: 11.33B parameters);
# such a model is not saved (--save-model needs a preset's shape) and not generated from.
LAYERS="${LAYERS:-}"
# WARMUP=1: a standard schedule instead of a warmup-sized constant lr: DeepSpeed's WarmupLR
# (linear, 1000 steps) to GPT-3's lr 1e-4, and the step's phase times in the log.
WARMUP="${WARMUP:-0}"
# offload_param.max_in_cpu: parameter elements read ahead of use (6.7b's units are 201M;
# 13b's 315M need more to read even one ahead).
MAX_IN_CPU="${MAX_IN_CPU:-250000000}"
mkdir -p "$OUT"
COMMON=(--model gpt --context "$CONTEXT" --threads 2 --no-eval --seed 1 --steps "$STEPS")
[[ $CKPT == 1 ]] && COMMON+=(--activation-checkpointing)

/usr/bin/python3 - "$OUT" "$DIR/nvme" "$WARMUP" "$MAX_IN_CPU" <<'PY'
import json, sys
out, nvme, warmup, max_in_cpu = sys.argv[1:]
# lr: with no warmup, Adam's first steps move every weight by about lr (sign-like); at this
# width and depth 3e-5 already sends the loss from 6.4 to 24 (fp32 plain LibTorch too), so
# a 3-step run takes a warmup-sized lr.
base = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1.5e-7}}}
zoff = dict(base, bf16={"enabled": True})
zoff["optimizer"] = {"type": "AdamW", "state_dtype": "int8", "params": {"lr": 1.5e-7}}
zoff["zero_optimization"] = {
    "stage": 3, "sub_group_size": 10000000, "reduce_bucket_size": 100000000,
    "offload_optimizer": {"device": "nvme", "nvme_path": nvme, "gradients": "stream"},
    "offload_param": {"device": "nvme", "nvme_path": nvme, "max_in_cpu": int(max_in_cpu)}}
if warmup == "1":
    zoff["optimizer"]["params"] = {"lr": 1e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}
    zoff["scheduler"] = {"type": "WarmupLR", "params": {
        "warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 1000,
        "warmup_type": "linear"}}
    zoff["wall_clock_breakdown"] = True
    zoff["steps_per_print"] = 1
json.dump(zoff, open(f"{out}/zoff.json", "w"), indent=1)
json.dump(base, open(f"{out}/plain.json", "w"), indent=1)
PY

# disk_watch FILE: the largest `du -sb DIR` seen, every 10 s, until killed
disk_watch() {
  local max=0 now
  while true; do
    now=$(du -sb "$DIR" 2>/dev/null | cut -f1 || echo 0)
    (( now > max )) && max=$now && echo "$max" > "$1"
    sleep 10
  done
}

if [[ $SKIP_ZOFF != 1 ]]; then
  rm -rf "$DIR"
  mkdir -p "$DIR/nvme"
  disk_watch "$OUT/zoff_disk_bytes.txt" &
  watcher=$!
  cmd=("$ZOFF" train --preset "$PRESET" --config "$OUT/zoff.json" "${COMMON[@]}"
       --log "$OUT/zoff.jsonl")
  if [[ -n $LAYERS ]]; then
    cmd+=(--layers "$LAYERS")
  else
    cmd+=(--save-model "$DIR/gpt_$PRESET.safetensors")
  fi
  echo "\$ ${cmd[*]}" | tee "$OUT/zoff.txt"
  /usr/bin/time -v "${cmd[@]}" >>"$OUT/zoff.txt" 2>"$OUT/zoff.time" || { tail -5 "$OUT/zoff.time"; kill $watcher; exit 1; }
  kill $watcher
  tail -3 "$OUT/zoff.txt"
fi
if [[ $SKIP_ZOFF != 1 && -z $LAYERS ]]; then
  cmd=("$ZOFF" generate --checkpoint "$DIR/gpt_$PRESET.safetensors" --prompt "Q: What is a computer?
A:" --tokens 16 --seed 1 --threads 2)
  echo "\$ ${cmd[*]}" | tee "$OUT/generate.txt"
  /usr/bin/time -v "${cmd[@]}" >>"$OUT/generate.txt" 2>"$OUT/generate.time"
  cat "$OUT/generate.txt"
  grep -E "weights streamed|Maximum resident|Elapsed" "$OUT/generate.time"
fi

# plain LAYERS: 0 when plain LibTorch trains gpt xl's width with LAYERS blocks
plain() {
  local tag="plain_$1"
  cmd=(choom -n 1000 -- "$ZOFF" train --reference --preset xl --layers "$1"
       --config "$OUT/plain.json" "${COMMON[@]}" --log "$OUT/$tag.jsonl")
  echo "\$ ${cmd[*]}" | tee "$OUT/$tag.txt"
  /usr/bin/time -v "${cmd[@]}" >>"$OUT/$tag.txt" 2>"$OUT/$tag.time"
}
if [[ $SKIP_PLAIN != 1 ]]; then
  : >"$OUT/plain_results.txt"
  # Up by 4 blocks from 12 until one fails, then the 3 in between from below.
  last_ok=0
  for layers in 12 16 20 24 28 32; do
    if plain "$layers"; then last_ok=$layers; echo "$layers ok" >>"$OUT/plain_results.txt"
    else echo "$layers failed" >>"$OUT/plain_results.txt"; break; fi
  done
  for layers in $((last_ok + 1)) $((last_ok + 2)) $((last_ok + 3)); do
    if plain "$layers"; then last_ok=$layers; echo "$layers ok" >>"$OUT/plain_results.txt"
    else echo "$layers failed" >>"$OUT/plain_results.txt"; break; fi
  done
  echo "$last_ok" >"$OUT/plain_largest_layers.txt"
fi

/usr/bin/python3 - "$OUT" "$PRESET" "$CONTEXT" "$LAYERS" <<'PY'
import json, os, re, sys
out, preset, context, blocks = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def gpt_params(layers, width, context, vocab=256):
    return vocab * width + context * width + layers * (12 * width * width + 13 * width) + 2 * width
def max_rss(tag):
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{out}/{tag}.time").read())[1]) * 1024
def steps(tag):
    return [json.loads(l) for l in open(f"{out}/{tag}.jsonl") if '"event"' not in l]
shapes = {"medium": (12, 896), "large": (28, 1024), "6.7b": (32, 4096), "13b": (40, 5120), "2.7b": (32, 2560), "xl": (26, 2048)}
if os.path.exists(f"{out}/zoff.time"):
    layers, width = shapes[preset]
    layers = int(blocks) if blocks else layers
    n = gpt_params(layers, width, context)
    rows = steps("zoff")
    disk = int(open(f"{out}/zoff_disk_bytes.txt").read())
    print(f"zoff gpt {preset}: {n / 1e9:.3f}B parameters, context {context}, batch 1")
    for r in rows:
        print(f"  step {r['step']}: loss {r['loss']:.4f}, lr {r['lr']:.3g}, "
              f"{1 / r['samples_per_s']:.1f} s, {r['tokens_per_s']:.1f} tokens/s, "
              f"peak RSS {r['peak_rss'] / 2**30:.2f} GiB"
              + (f", times (ms) {json.dumps(r['times_ms'])}" if "times_ms" in r else ""))
    print(f"  peak RSS (time -v) {max_rss('zoff') / 2**30:.2f} GiB; disk {disk / 1e9:.1f} GB")
    if os.path.exists(f"{out}/generate.time"):
        print(f"  zoff generate: peak RSS {max_rss('generate') / 2**30:.2f} GiB")
if os.path.exists(f"{out}/plain_largest_layers.txt"):
    best = int(open(f"{out}/plain_largest_layers.txt").read())
    for line in open(f"{out}/plain_results.txt"):
        l, verdict = line.split()
        rss = max_rss(f"plain_{l}") if verdict == "ok" else 0
        print(f"plain LibTorch, {l} blocks x 2048: {gpt_params(int(l), 2048, context) / 1e9:.3f}B "
              f"{verdict}" + (f", peak RSS {rss / 2**30:.2f} GiB" if rss else ""))
    if best and os.path.exists(f"{out}/zoff.time"):
        p = gpt_params(best, 2048, context)
        print(f"ratio: {n / 1e9:.3f}B / {p / 1e9:.3f}B = {n / p:.2f}x")
PY
