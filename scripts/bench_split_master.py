#!/usr/bin/env python3
"""The split master against the 4-byte master (issue 47): the same gpt run with
offload_optimizer.split_master true and false, both on disk (--device nvme) or both in host
memory (--device cpu), for ZeRO stages 1-3, worlds 1-3 and state dtypes fp32, bf16 and int8.
Prints per case the steps whose losses differ,
the largest relative loss difference, the odd ties the split run settled (its own line),
and how many final bf16 parameters differ. Not a timing: runs may share cores.

  $ZOFF_VENV/bin/python scripts/bench_split_master.py [--steps 50] [--preset tiny] [--device cpu]
"""
import argparse
import itertools
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np


def safetensors_arrays(path):
    """name -> raw bytes array (uint16 for BF16) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dtype = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32}[t["dtype"]]
        out[name] = np.frombuffer(data[a:b], dtype=dtype)
    return out


def config_for(base, stage, world, states, split, nvme, device):
    c = json.load(open(base))
    c["bf16"] = {"enabled": True}
    c["train_batch_size"] = c["train_micro_batch_size_per_gpu"] * world
    c["optimizer"]["state_dtype"] = states
    z = c["zero_optimization"]
    z["stage"] = stage
    z["sub_group_size"] = 100000
    z["offload_optimizer"] = {"device": device, "split_master": split}
    if device == "nvme":
        z["offload_optimizer"]["nvme_path"] = nvme
    if stage == 3:
        z["stage3_param_persistence_threshold"] = 0
        if device == "nvme":
            z["offload_param"] = {"device": "nvme", "nvme_path": nvme}
    return c


def run(zoff, work, tag, config, world, args):
    cfg = os.path.join(work, tag + ".json")
    json.dump(config, open(cfg, "w"))
    train = [zoff, "train", "--model", "gpt", "--preset", args.preset, "--config", cfg,
             "--steps", str(args.steps), "--seed", "3", "--no-eval", "--threads", "1",
             "--log", os.path.join(work, tag + ".jsonl"),
             "--save-model", os.path.join(work, tag + ".safetensors")]
    cmd = train if world == 1 else [zoff, "launch", "-n", str(world), "--threads-per-rank",
                                    "1", "--"] + train
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{tag}: exit {out.returncode}\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    losses = [json.loads(l)["loss"] for l in open(os.path.join(work, tag + ".jsonl"))
              if '"loss"' in l]
    m = re.search(r"split master: (\d+) odd ties settled", out.stdout)
    return losses, int(m.group(1)) if m else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--zoff", default="build/zoff")
    p.add_argument("--stages", default="1,2,3", help="ZeRO stages, comma-separated")
    p.add_argument("--worlds", default="1,2,3", help="ranks, comma-separated")
    p.add_argument("--device", default="nvme", choices=("nvme", "cpu"),
                   help="offload_optimizer.device of both runs (stage 3: the parameters too)")
    args = p.parse_args()
    base = "examples/configs/gpt_tiny_stage2.json"
    stages = [int(x) for x in args.stages.split(",")]
    worlds = [int(x) for x in args.worlds.split(",")]
    print(f"$ python scripts/bench_split_master.py --steps {args.steps} --preset {args.preset} "
          f"--stages {args.stages} --worlds {args.worlds} --device {args.device}")
    print("stage world states | steps differing | max rel loss diff | ties settled (rank 0) "
          "| params differing / all")
    for stage, world, states in itertools.product(stages, worlds, ("fp32", "bf16", "int8")):
        with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="zoff_split_") as work:
            nvme = os.path.join(work, "nvme")
            os.mkdir(nvme)
            full, _ = run(args.zoff, work, "full",
                          config_for(base, stage, world, states, False, nvme, args.device), world,
                          args)
            split, ties = run(args.zoff, work, "split",
                              config_for(base, stage, world, states, True, nvme, args.device),
                              world, args)
            a = safetensors_arrays(os.path.join(work, "full.safetensors"))
            b = safetensors_arrays(os.path.join(work, "split.safetensors"))
        differ = [i + 1 for i, (x, y) in enumerate(zip(full, split)) if x != y]
        rel = max(abs(x - y) / abs(x) for x, y in zip(full, split))
        pdiff = sum(int(np.count_nonzero(a[k] != b[k])) for k in a)
        total = sum(a[k].size for k in a)
        first = f" (first {differ[0]})" if differ else ""
        print(f"{stage} {world} {states:5s} | {len(differ):3d}{first} | {rel:.3g} | {ties} | "
              f"{pdiff} / {total}", flush=True)


if __name__ == "__main__":
    main()
