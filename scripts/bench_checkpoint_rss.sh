#!/usr/bin/env bash
# Peak RSS of resuming and of exporting a large checkpoint (issue 12): gpt PRESET (xl,
# 1.31B parameters) trained 1 step at world WORLD, stage 2, bf16, master and optimizer
# states on disk (nvme tier) and saved; then (a) resumed at the same layout for one more
# step, printing the RSS before loading and the peak while loading (rank 0), (b) resumed
# at world 1, stage 3, (c) resumed at stage 3 with everything on disk at world WORLD and at
# world 1 ("lean": the process holds little but what loading costs), and (d) exported to
# safetensors under /usr/bin/time -v. Each figure
# is compared with one rank's shard of the checkpoint (fp32 master + m + v: 12 bytes per
# parameter / WORLD) plus the largest tensor. Disk: about 36 GB under DIR for xl.
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
PRESET="${PRESET:-xl}"
WORLD="${WORLD:-2}"
DIR="${DIR:-/var/tmp/zoff_bench_ckpt}"
OUT="${OUT:-runs/bench_checkpoint_rss}"
rm -rf "$DIR"
mkdir -p "$DIR/nvme" "$OUT"

# config NAME STAGE [lean]: writes $OUT/NAME.json (bf16, optimizer states on disk). The
# global batch stays WORLD samples at every world size (resuming needs the same batch).
# lean: stage 3 with the gradient shard and the parameters on disk too, small sub-groups
# and one unit read ahead: the resuming process holds little besides what loading costs.
config() {
  /usr/bin/python3 - "$OUT/$1.json" "$2" "$WORLD" "$DIR/nvme" "${3:-}" <<'PY'
import json, sys
path, stage, world, nvme, lean = sys.argv[1:]
zero = {"stage": int(stage), "sub_group_size": 50000000, "reduce_bucket_size": 50000000,
        "offload_optimizer": {"device": "nvme", "nvme_path": nvme}}
if lean:
    zero.update({"sub_group_size": 10000000, "reduce_bucket_size": 10000000,
                 "stage3_prefetch_bucket_size": 1, "stage3_max_live_parameters": 1})
    zero["offload_optimizer"]["gradients"] = "nvme"
    zero["offload_param"] = {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 1}
json.dump({"train_batch_size": int(world), "train_micro_batch_size_per_gpu": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
           "bf16": {"enabled": True}, "zero_optimization": zero},
          open(path, "w"), indent=1)
PY
}

# run TAG RANKS ARGS...: `zoff train` under /usr/bin/time -v (max RSS: the largest rank)
run() {
  local tag=$1 ranks=$2
  shift 2
  echo "\$ zoff launch -n $ranks -- zoff train $*" | tee "$OUT/$tag.txt"
  /usr/bin/time -v "$ZOFF" launch -n "$ranks" -- "$ZOFF" train --model gpt --preset "$PRESET" \
    --context 64 --threads 1 --eval-every 0 "$@" >>"$OUT/$tag.txt" 2>"$OUT/$tag.time"
  grep -E "resumed from|done:" "$OUT/$tag.txt" || true
  grep -E "Maximum resident" "$OUT/$tag.time"
}

config s2 2
config s3 3
config s3lean 3 lean
run save "$WORLD" --config "$OUT/s2.json" --steps 1 --save "$DIR/ckpt" --seed 1
du -sb "$DIR/ckpt" | tee "$OUT/ckpt_bytes.txt"
run resume_same "$WORLD" --config "$OUT/s2.json" --steps 2 --resume "$DIR/ckpt" --seed 1
rm -rf "$DIR/nvme"/*
run resume_w1s3 1 --config "$OUT/s3.json" --steps 2 --resume "$DIR/ckpt" --seed 1
rm -rf "$DIR/nvme"/*
run resume_lean "$WORLD" --config "$OUT/s3lean.json" --steps 2 --resume "$DIR/ckpt" --seed 1
rm -rf "$DIR/nvme"/*
run resume_lean_w1 1 --config "$OUT/s3lean.json" --steps 2 --resume "$DIR/ckpt" --seed 1
echo "\$ zoff export $DIR/ckpt --out $DIR/model.safetensors" | tee "$OUT/export.txt"
/usr/bin/time -v "$ZOFF" export "$DIR/ckpt" --out "$DIR/model.safetensors" \
  >>"$OUT/export.txt" 2>"$OUT/export.time"
grep -E "Maximum resident" "$OUT/export.time"
ls -l "$DIR/model.safetensors"
"$ZOFF" inspect "$DIR/ckpt" --tensors --json >"$OUT/inspect.json"
/usr/bin/python3 - "$OUT" "$WORLD" <<'PY'
import json, math, re, sys
out, world = sys.argv[1], int(sys.argv[2])
info = json.load(open(f"{out}/inspect.json"))
largest = max(math.prod(t["shape"]) for t in info["params"]) * 4  # fp32
shard = max(f["bytes"] for f in info["files"] if f["name"].startswith("rank_"))
bound = shard + largest
print(f"one rank's shard file {shard / 1e9:.3f} GB + largest tensor {largest / 1e6:.1f} MB"
      f" = bound {bound / 1e9:.3f} GB")
def max_rss(tag):
    text = open(f"{out}/{tag}.time").read()
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) * 1024
tags = ["save", "resume_same", "resume_w1s3", "resume_lean", "resume_lean_w1", "export"]
for tag in tags:
    rss = max_rss(tag)
    print(f"{tag:12s} max RSS {rss / 1e9:.3f} GB = {rss / bound:.3f} of the bound")
for tag in tags[1:-1]:
    for line in open(f"{out}/{tag}.txt"):
        if "resumed from" in line:
            print(f"{tag:12s} {line.strip()}")
PY
rm -rf "$DIR"
