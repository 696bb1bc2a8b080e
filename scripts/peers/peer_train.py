"""One rank of scripts/bench_peers.sh: trains examples/python/gpt.py's GPT for --steps steps
with one system (scripts/peers/systems.py) on the global batches every system sees
(gpt.batch_windows, each rank its slice), and writes OUT_DIR/rank<R>.json: per step the loss,
learning rate, gradient norm, wall time and phase times, then this rank's peak RSS (bytes,
getrusage's ru_maxrss: what /usr/bin/time -v reports).
Under `zoff launch -n N` (torchrun's variables); --system reference runs in one process."""
import argparse
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from gpt import GPT, PRESETS, batch_windows, fortunes_bytes  # noqa: E402
from systems import SYSTEMS  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--config", required=True, help="the DeepSpeed-style JSON every system reads")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--fsdp-offload", action="store_true", help="FSDP2 with CPUOffloadPolicy")
    p.add_argument("--start-bf16-rounded", action="store_true",
                   help="start from the initial weights rounded to bf16 (DeepSpeed's master's start)")
    p.add_argument("--out-dir", required=True)
    # The capacity ladder (scripts/peers/capacity.py): the preset's shape with other blocks,
    # heads, width or context, and DeepSpeed's way to build a model larger than memory.
    for name in ("layers", "heads", "width", "context"):
        p.add_argument(f"--{name}", type=int, help=f"the preset's {name}, overridden")
    p.add_argument("--zero-init", action="store_true",
                   help="build the model inside deepspeed.zero.Init (--system deepspeed)")
    a = p.parse_args()
    if a.zero_init and a.system != "deepspeed":
        raise SystemExit(f"peer_train: --zero-init is DeepSpeed's; not for --system {a.system}")
    with open(a.config) as f:
        config = json.load(f)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    threads = os.environ.get("ZOFF_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    torch.manual_seed(0)  # the same initial weights in every system and on every rank
    preset = dict(PRESETS[a.preset])
    for name, key in (("layers", "n_layer"), ("heads", "n_head"), ("width", "n_embd"),
                      ("context", "block_size")):
        value = getattr(a, name)
        if value is not None:
            if value <= 0:
                raise SystemExit(f"peer_train: --{name} {value}: must be positive")
            preset[key] = value
    if preset["n_embd"] % preset["n_head"]:
        raise SystemExit(f"peer_train: width {preset['n_embd']} is not a multiple of "
                         f"{preset['n_head']} heads")
    build = lambda: GPT(**preset)  # noqa: E731
    model = SYSTEMS[a.system].construct(build, config) if a.zero_init else build()
    text = fortunes_bytes()
    if a.start_bf16_rounded:
        # Where DeepSpeed's fp32 master starts with bf16 on: it casts the module to bf16 in
        # initialize() and copies its master from that, so the initial weights' low bits are gone.
        with torch.no_grad():
            for t in model.parameters():
                t.copy_(t.to(torch.bfloat16).float())
    system = SYSTEMS[a.system](model, config, a)
    batch, block = config["train_batch_size"], preset["block_size"]
    steps = []
    for step in range(a.steps):
        x = batch_windows(text, step, batch, block).chunk(world)[rank]
        start = time.perf_counter()
        loss, lr, norm, times = system.step(x)
        steps.append({"loss": loss, "lr": lr, "grad_norm": norm,
                      "seconds": time.perf_counter() - start, "times_ms": times})
    params = getattr(system, "param_count", None) or sum(t.numel() for t in model.parameters())
    result = {"system": a.system, "implementation": system.implementation, "rank": rank,
              "world": world, "tokens_per_step": batch * block, "params": params, "steps": steps,
              "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    os.makedirs(a.out_dir, exist_ok=True)
    tmp = os.path.join(a.out_dir, f".rank{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, os.path.join(a.out_dir, f"rank{rank}.json"))


if __name__ == "__main__":
    main()
