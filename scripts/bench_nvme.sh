#!/usr/bin/env bash
# The NVMe tier's figures, one run: (1) gpt small bf16, stages 2 and 3, worlds 1 and 2, 50
# steps with the optimizer (and at stage 3 the parameters) on disk, losses compared bit for
# bit with cpu offload; (2) peak RSS of gpt medium bf16 on one rank with cpu offload, nvme
# optimizer offload, and stage 3 with nvme parameters too; (3) step time of gpt medium with
# nvme offload and the step overlapped with backward against cpu offload. Run it alone (2
# cores; this VM's bandwidth swings, so the timed runs alternate).
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
OUT="${OUT:-runs/bench_nvme}"
NVME="${NVME:-/var/tmp/zoff_bench_nvme}"
STEPS="${STEPS:-50}"
MEDIUM_STEPS="${MEDIUM_STEPS:-6}"
ROUNDS="${ROUNDS:-2}"
PARTS="${PARTS:-bitwise rss time}"
mkdir -p "$OUT" "$NVME"

# config NAME STAGE OPTIM_DEVICE PARAM_DEVICE BATCH MICRO [GRADS]: writes $OUT/NAME.json
config() {
  /usr/bin/python3 - "$OUT/$1.json" "$2" "$3" "$4" "$5" "$6" "$NVME" "${7:-cpu}" <<'PY'
import json, sys
path, stage, optim, param, batch, micro, nvme, grads = sys.argv[1:]
z = {"stage": int(stage), "reduce_bucket_size": 5000000, "overlap_comm": True,
     "sub_group_size": 2000000,
     "offload_optimizer": {"device": optim, "nvme_path": nvme}}
if optim == "nvme":
    z["offload_optimizer"]["gradients"] = grads
if param != "none":
    z["offload_param"] = {"device": param, "nvme_path": nvme}
json.dump({"train_batch_size": int(batch), "train_micro_batch_size_per_gpu": int(micro),
           "steps_per_print": 10,
           "optimizer": {"type": "AdamW",
                         "params": {"lr": 1e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
           "bf16": {"enabled": True}, "zero_optimization": z}, open(path, "w"), indent=1)
PY
}

# train TAG RANKS ARGS...: one `zoff train` under /usr/bin/time -v, log in $OUT/TAG.jsonl
train() {
  local tag=$1 ranks=$2
  shift 2
  local cmd=(/usr/bin/time -v "$ZOFF" launch -n "$ranks" -- "$ZOFF" train --model gpt --seed 1
             --log "$OUT/$tag.jsonl" "$@")
  echo "+ ${cmd[*]}"
  "${cmd[@]}" >"$OUT/$tag.out" 2>"$OUT/$tag.time" || {
    tail -5 "$OUT/$tag.out" "$OUT/$tag.time"
    exit 1
  }
}

if [[ " $PARTS " == *" bitwise "* ]]; then
  for stage in 2 3; do
    param=none
    [[ $stage == 3 ]] && param=nvme
    config "small_s${stage}_cpu" "$stage" cpu none 16 8
    config "small_s${stage}_nvme" "$stage" nvme "$param" 16 8
    for world in 1 2; do
      for dev in cpu nvme; do
        train "small_s${stage}_w${world}_$dev" "$world" --preset small \
          --config "$OUT/small_s${stage}_$dev.json" --steps "$STEPS"
      done
    done
  done
fi

if [[ " $PARTS " == *" rss "* || " $PARTS " == *" time "* ]]; then
  config medium_s2_cpu 2 cpu none 1 1
  config medium_s2_nvme 2 nvme none 1 1
  config medium_s3_nvme_params 3 nvme nvme 1 1
  config medium_s3_nvme_all 3 nvme nvme 1 1 nvme
  for round in $(seq 1 "$ROUNDS"); do
    for variant in s2_cpu s2_nvme s3_nvme_params s3_nvme_all; do
      train "medium_${variant}_r$round" 1 --preset medium --config "$OUT/medium_$variant.json" \
        --steps "$MEDIUM_STEPS"
    done
  done
fi

/usr/bin/python3 - "$OUT" "$ROUNDS" "$PARTS" <<'PY'
import json, re, statistics, sys
out, rounds, parts = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def rows(tag):
    return [json.loads(l) for l in open(f"{out}/{tag}.jsonl") if '"event"' not in l]
def rss_gib(tag):  # /usr/bin/time -v reports the largest process: the rank
    t = open(f"{out}/{tag}.time").read()
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)[1]) / 2**20
if "bitwise" in parts:
    print("bitwise: gpt small bf16, losses of every step, nvme vs cpu offload")
    for stage in (2, 3):
        for world in (1, 2):
            a, b = rows(f"small_s{stage}_w{world}_cpu"), rows(f"small_s{stage}_w{world}_nvme")
            same = len(a) == len(b) and all(x["loss"] == y["loss"] and
                                            x["grad_norm"] == y["grad_norm"] for x, y in zip(a, b))
            what = "optimizer on nvme" + (", parameters on nvme" if stage == 3 else "")
            print(f"  stage {stage} world {world} ({what}): {len(b)} steps, "
                  f"{'bitwise equal' if same else 'DIFFERENT'}; last loss {b[-1]['loss']:.6f}")
if "rss" in parts or "time" in parts:
    psi = 116893952  # gpt medium parameters
    def step_s(tag):  # median step time after the first two (warm-up)
        r = rows(tag)
        return statistics.median(1.0 / x["samples_per_s"] for x in r[2:])  # batch 1
    for r in range(1, rounds + 1):
        cpu, nv, s3, s3g = (f"medium_{v}_r{r}"
                            for v in ("s2_cpu", "s2_nvme", "s3_nvme_params", "s3_nvme_all"))
        print(f"round {r}: gpt medium bf16, 1 rank, batch 1 (psi = {psi:,} params)")
        print(f"  peak RSS GiB: cpu offload {rss_gib(cpu):.3f}, nvme optimizer {rss_gib(nv):.3f},"
              f" stage 3 + nvme params {rss_gib(s3):.3f}")
        saved = (rss_gib(cpu) - rss_gib(nv)) * 2**30
        print(f"  cpu - nvme = {saved / 1e9:.3f} GB = {saved / (12 * psi):.3f} x 12 psi"
              f" (goal >= 0.9)")
        print(f"  nvme - (stage 3 + nvme params) = "
              f"{(rss_gib(nv) - rss_gib(s3)) * 2**30 / 1e9:.3f} GB (2 psi = {2 * psi / 1e9:.3f} GB)")
        print(f"  + gradient shard on disk: peak RSS {rss_gib(s3g):.3f} GiB, "
              f"{(rss_gib(s3) - rss_gib(s3g)) * 2**30 / 1e9:.3f} GB below (4 psi = "
              f"{4 * psi / 1e9:.3f} GB), median step {step_s(s3g):.3f} s")
        print(f"  median step s: cpu offload {step_s(cpu):.3f}, nvme + overlap {step_s(nv):.3f}"
              f" = {step_s(nv) / step_s(cpu):.3f}x (goal <= 1.2x), stage 3 + nvme params "
              f"{step_s(s3):.3f}")
PY
