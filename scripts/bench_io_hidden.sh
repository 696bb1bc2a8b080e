#!/usr/bin/env bash
# Is the disk tier's I/O hidden? gpt PRESET (default 1.3b) bf16, stage 3, one rank, batch 1:
# the step with master weights, optimizer states and parameters on disk (offload_optimizer
# nvme, offload_param nvme) against the same step with them in RAM (offload_optimizer cpu,
# parameters in RAM), rounds alternating in one run
# (this VM's bandwidth swings). Prints per round the median step time after the first two
# steps, the ratio (issue 47 asks <= 1.15x), the I/O waits the trainer timed, peak RSS and
# bytes on disk. Run it alone (2 cores).
# STATES: optimizer.state_dtype of both (fp32, bf16, int8).
# GRADS: offload_optimizer.gradients of the disk run: stream (default: kept nowhere, each
# sub-group's gradients go straight into the overlapped step, as the largest models run),
# nvme (the fp32 gradient shard on disk too, read-add-write per bucket) or cpu (in RAM).
# BASELINE: another zoff binary (e.g. a copy of build/zoff from before a change) whose disk
# run joins each round, for an A/B of the change in the same run. Even rounds run the
# variants in the reverse order.
#   PRESET=1.3b CONTEXT=256 STEPS=6 ROUNDS=2 STATES=fp32 GRADS=nvme bash scripts/bench_io_hidden.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ZOFF="${ZOFF_BUILD_DIR:-build}/zoff"
PRESET="${PRESET:-1.3b}"
CONTEXT="${CONTEXT:-256}"
STEPS="${STEPS:-6}"
ROUNDS="${ROUNDS:-2}"
STATES="${STATES:-fp32}"
GRADS="${GRADS:-stream}"
OUT="${OUT:-runs/bench_io_hidden}"
BASELINE="${BASELINE:-}"
NVME="${NVME:-/var/tmp/zoff_bench_io_hidden}"
[[ -z "$BASELINE" || -x "$BASELINE" ]] || { echo "bench_io_hidden: BASELINE=$BASELINE: not an executable" >&2; exit 2; }
[[ "$STEPS" -ge 3 ]] || { echo "bench_io_hidden: STEPS=$STEPS: need >= 3 (two are warm-up)" >&2; exit 2; }
case "$GRADS" in stream | nvme | cpu) ;; *)
  echo "bench_io_hidden: GRADS=$GRADS: must be stream, nvme or cpu" >&2
  exit 2
  ;;
esac
mkdir -p "$OUT"
trap 'rm -rf "$NVME"' EXIT

# config NAME DEVICE: stage 3, bf16, AdamW with a warmup; DEVICE cpu (all in RAM) or nvme.
config() {
  /usr/bin/python3 - "$OUT/$1.json" "$2" "$NVME" "$STATES" "$GRADS" <<'PY'
import json, sys
path, device, nvme, states, grads = sys.argv[1:]
z = {"stage": 3, "sub_group_size": 20000000,
     "offload_optimizer": {"device": device, "nvme_path": nvme}}
if device == "nvme":
    z["offload_optimizer"]["gradients"] = grads
    z["offload_param"] = {"device": "nvme", "nvme_path": nvme}
json.dump({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "steps_per_print": 1,
           "wall_clock_breakdown": True,
           "optimizer": {"type": "AdamW", "state_dtype": states,
                         "params": {"lr": 1e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
           "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2}},
           "bf16": {"enabled": True}, "zero_optimization": z}, open(path, "w"), indent=1)
PY
}
config ram cpu
config disk nvme

variants=(ram disk)
[[ -n "$BASELINE" ]] && variants+=(baseline)
for round in $(seq 1 "$ROUNDS"); do
  order=("${variants[@]}")  # even rounds run the variants in the reverse order
  ((round % 2 == 0)) && for ((i = ${#variants[@]} - 1, j = 0; i >= 0; i--, j++)); do order[j]="${variants[i]}"; done
  for variant in "${order[@]}"; do
    tag="${variant}_r$round"
    binary="$ZOFF" config="$variant"
    [[ "$variant" == baseline ]] && binary="$BASELINE" config=disk
    cmd=(/usr/bin/time -v "$binary" train --model gpt --preset "$PRESET" --context "$CONTEXT"
         --seed 1 --steps "$STEPS" --no-eval --config "$OUT/$config.json" --log "$OUT/$tag.jsonl")
    echo "+ ${cmd[*]}"
    "${cmd[@]}" >"$OUT/$tag.out" 2>"$OUT/$tag.time" || {
      tail -5 "$OUT/$tag.out" "$OUT/$tag.time"
      exit 1
    }
    rm -rf "$NVME"
  done
done

/usr/bin/python3 - "$OUT" "$ROUNDS" "$PRESET" "$CONTEXT" "$STATES" "$GRADS" "$BASELINE" <<'PY'
import json, re, statistics, sys
out, rounds, preset, context, states, grads, baseline = sys.argv[1], int(sys.argv[2]), *sys.argv[3:8]
def rows(tag):
    return [json.loads(l) for l in open(f"{out}/{tag}.jsonl") if '"event"' not in l]
def step_s(tag):  # median after the first two steps (warm-up); batch 1
    return statistics.median(1.0 / r["samples_per_s"] for r in rows(tag)[2:])
def waits(tag):
    keys = ("io_wait_params", "io_wait_grad_window", "io_wait_optimizer")
    rs = [r for r in rows(tag)[2:] if "times_ms" in r]
    return {k: statistics.median(r["times_ms"][k] for r in rs) / 1e3 for k in keys} if rs else {}
def rss_gib(tag):
    t = open(f"{out}/{tag}.time").read()
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)[1]) / 2**20
def cpu_s(tag):  # user and system CPU seconds of the whole run
    t = open(f"{out}/{tag}.time").read()
    return tuple(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", t)[1]) for k in ("User", "System"))
def cpu_text(tag):
    return "CPU user %.0f s, system %.0f s" % cpu_s(tag)
print(f"gpt {preset}, context {context}, bf16, stage 3, 1 rank, batch 1, {states} states, "
      f"gradients of the disk run: {grads}")
for r in range(1, rounds + 1):
    ram, disk = f"ram_r{r}", f"disk_r{r}"
    w = waits(disk)
    wait = sum(w.values())
    print(f"round {r}: step in RAM {step_s(ram):.2f} s, on disk {step_s(disk):.2f} s = "
          f"{step_s(disk) / step_s(ram):.3f}x (goal <= 1.15x); disk I/O wait {wait:.2f} s = "
          f"{wait / step_s(disk):.1%} of its step ("
          + ", ".join(f"{k[8:]} {v:.2f} s" for k, v in w.items()) + "); peak RSS "
          f"{rss_gib(ram):.2f} / {rss_gib(disk):.2f} GiB; on disk "
          f"{rows(disk)[-1]['mem'].get('nvme', {}).get('total', 0) / 1e9:.2f} GB; last loss "
          f"{rows(ram)[-1]['loss']:.4f} / {rows(disk)[-1]['loss']:.4f}; {cpu_text(ram)} / "
          f"{cpu_text(disk)}")
    if baseline:
        base = f"baseline_r{r}"
        w = sum(waits(base).values())
        print(f"  baseline {baseline}: on disk {step_s(base):.2f} s = "
              f"{step_s(base) / step_s(ram):.3f}x; I/O wait {w:.2f} s; peak RSS "
              f"{rss_gib(base):.2f} GiB; last loss {rows(base)[-1]['loss']:.4f}; {cpu_text(base)}")
PY
