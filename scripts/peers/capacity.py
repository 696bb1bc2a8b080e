"""scripts/bench_capacity.sh's driver: the capacity ladder. At gpt xl's width (2048 wide, 32
heads), context 256, batch 1, one rank, the largest depth each system trains for --steps
steps on this machine with its model states on disk:
  - zoff (`zoff train`), its configuration for the largest models: stage 3, bf16, int8
    optimizer states, master (split), states and parameters on NVMe, gradients streamed;
  - DeepSpeed ZeRO-Infinity: stage 3 with offload_param and offload_optimizer on NVMe, bf16,
    the model built inside deepspeed.zero.Init (never whole in RAM).
Both get the same AdamW and WarmupLR and the same directory for their files. Each run goes
under `choom -n 1000` (the kernel's OOM killer takes it, not the session) and
`/usr/bin/time -v` (peak RSS); the bytes under the directory are sampled every 2 s. A
system's ladder goes up its --*-depths and stops at its first failure, whose one line is
the answer to "what stops it one step up"."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

from bench import disk_bytes, first_error_line  # scripts/peers/bench.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WIDTH, HEADS = 2048, 32  # gpt xl's (include/zoff/models/gpt_config.h)

OPTIMIZER = {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                         "weight_decay": 0.1}}
SCHEDULER = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-4,
                                            "warmup_num_steps": 1000, "warmup_type": "linear"}}


def configs(nvme):
    """zoff's and DeepSpeed's configs, their files under `nvme`."""
    base = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
            "optimizer": OPTIMIZER, "scheduler": SCHEDULER, "steps_per_print": 1}
    zoff = json.loads(json.dumps(base))
    zoff["optimizer"]["state_dtype"] = "int8"
    zoff["wall_clock_breakdown"] = True
    zoff["zero_optimization"] = {
        "stage": 3, "sub_group_size": 10000000, "reduce_bucket_size": 100000000,
        "offload_optimizer": {"device": "nvme", "nvme_path": nvme, "gradients": "stream"},
        "offload_param": {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 250000000}}
    deepspeed = json.loads(json.dumps(base))
    # DeepSpeed's optimizer swap buffers are sized by sub_group_size (its default 1e9 would pin
    # a billion elements' worth): 1e7 as zoff's. Its parameter swapper holds one parameter per
    # buffer: with its defaults (5 buffers of 1e8 elements, up to 1e9 live parameters, 5e7
    # prefetched) the first forward at 24 blocks failed with "Not enough buffers 0 for
    # swapping 1", and so did 16 buffers of 2e7 elements at 48 blocks (2026-12-01); 64 of 2e7
    # (the largest weight, fc's 8192 x 2048, is 1.7e7; 2.6 GB of buffers in bf16), at most
    # 1e8 parameters live (two blocks) and 5e7 prefetched trained 24 blocks.
    deepspeed["zero_optimization"] = {
        "stage": 3, "sub_group_size": 10000000, "reduce_bucket_size": 100000000,
        "overlap_comm": True, "stage3_max_live_parameters": 100000000,
        "stage3_prefetch_bucket_size": 50000000,
        "offload_optimizer": {"device": "nvme", "nvme_path": nvme},
        "offload_param": {"device": "nvme", "nvme_path": nvme, "buffer_count": 64,
                          "buffer_size": 20000000}}
    return zoff, deepspeed


def gpt_params(depth, context, vocab=256):
    """Parameters of the byte-level GPT at xl's width: token and position embeddings, `depth`
    blocks of 12 C^2 + 13 C (qkv, proj, fc, mlp_proj with biases, two LayerNorms), the final
    LayerNorm; the head is tied to the token embedding."""
    c = WIDTH
    return vocab * c + context * c + depth * (12 * c * c + 13 * c) + 2 * c


class Ladder:
    def __init__(self, a):
        self.a = a
        self.zoff = os.path.join(ROOT, a.build_dir, "zoff")
        self.env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS=str(os.cpu_count()),
                        PYTHONPATH=os.pathsep.join([os.path.join(ROOT, a.build_dir, "python"),
                                                    os.environ.get("PYTHONPATH", "")]))

    def command(self, system, depth, config, work):
        if system == "zoff":
            return ["/usr/bin/time", "-v", self.zoff, "train", "--model", "gpt", "--preset", "xl",
                    "--layers", str(depth), "--context", str(self.a.context), "--config", config,
                    "--steps", str(self.a.steps), "--threads", str(os.cpu_count()), "--no-eval",
                    "--seed", "1", "--log", os.path.join(work, "log.jsonl")]
        return [self.zoff, "launch", "-n", "1", "--", "/usr/bin/time", "-v", sys.executable,
                os.path.join(HERE, "peer_train.py"), "--system", "deepspeed", "--preset", "medium",
                "--layers", str(depth), "--heads", str(HEADS), "--width", str(WIDTH), "--context",
                str(self.a.context), "--config", config, "--steps", str(self.a.steps),
                "--out-dir", work, "--zero-init"]

    def run(self, system, depth):
        """One rung: trains `depth` blocks for --steps steps; returns what it measured."""
        work = os.path.join(self.a.out, f"{system}_{depth}")
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(self.a.dir, ignore_errors=True)
        os.makedirs(work)
        os.makedirs(self.a.dir)
        zoff_cfg, ds_cfg = configs(self.a.dir)
        config = os.path.join(work, "config.json")
        with open(config, "w") as f:
            json.dump(zoff_cfg if system == "zoff" else ds_cfg, f, indent=1)
        cmd = ["choom", "-n", "1000", "--"] + self.command(system, depth, config, work)
        start = time.time()
        out, disk = self.launch(cmd)
        with open(os.path.join(work, "output.txt"), "w") as f:
            f.write("+ " + " ".join(cmd) + "\n" + out.stdout + out.stderr)
        shutil.rmtree(self.a.dir, ignore_errors=True)
        text = out.stdout + out.stderr
        rss = [int(v) * 1024 for v in re.findall(r"Maximum resident set size \(kbytes\): (\d+)", text)]
        r = {"system": system, "depth": depth, "params": self.params(system, depth, work),
             "seconds": time.time() - start, "peak_rss": max(rss) if rss else 0, "disk": disk,
             "ok": out.returncode == 0}
        if out.returncode == 0:
            r["losses"] = self.losses(system, work)
        else:
            killed = re.search(r"Command terminated by signal (\d+)", text)
            r["error"] = (f"killed by signal {killed.group(1)}" + (" (the OOM killer)" if killed.group(1) == "9" else "")
                          if killed else first_error_line(text))
        return r

    def launch(self, cmd):
        peak, done = [0], threading.Event()

        def sample():
            while not done.wait(2.0):
                peak[0] = max(peak[0], disk_bytes(self.a.dir))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            out = subprocess.run(cmd, env=self.env, cwd=ROOT, capture_output=True, text=True,
                                 timeout=self.a.timeout)
        finally:
            done.set()
            sampler.join()
        return out, peak[0]

    def params(self, system, depth, work):
        """The model's parameter count: DeepSpeed's own (rank0.json), or for zoff the GPT's
        (both build the same modules: examples/python/gpt.py is op for op the C++ gpt)."""
        if system == "deepspeed":
            try:
                return json.load(open(os.path.join(work, "rank0.json")))["params"]
            except (OSError, KeyError, ValueError):
                return gpt_params(depth, self.a.context)
        return gpt_params(depth, self.a.context)

    @staticmethod
    def losses(system, work):
        if system == "zoff":
            rows = [json.loads(line) for line in open(os.path.join(work, "log.jsonl")) if '"event"' not in line]
        else:
            rows = json.load(open(os.path.join(work, "rank0.json")))["steps"]
        return [row["loss"] for row in rows]


def print_table(results):
    print("\n| system | blocks | params | result | peak RSS | disk | wall s | losses |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        params = f"{r['params'] / 1e9:.2f}B" if r["params"] else "?"
        result = "trains" if r["ok"] else f"fails: {r['error']}"
        losses = ", ".join(f"{x:.3f}" for x in r.get("losses", []))
        print(f"| {r['system']} | {r['depth']} | {params} | {result} | {r['peak_rss'] / 2**30:.2f} GiB "
              f"| {r['disk'] / 1e9:.1f} GB | {r['seconds']:.0f} | {losses} |")
    best = {}
    for r in results:
        if r["ok"] and r["params"]:
            best[r["system"]] = max(best.get(r["system"], 0), r["params"])
    if "zoff" in best and "deepspeed" in best:
        print(f"\nlargest trained: zoff {best['zoff'] / 1e9:.2f}B, DeepSpeed ZeRO-Infinity "
              f"{best['deepspeed'] / 1e9:.2f}B: {best['zoff'] / best['deepspeed']:.2f}x")


def depths(text):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of block counts")
    if not values or any(v <= 0 for v in values) or values != sorted(values):
        raise argparse.ArgumentTypeError(f"{text!r}: block counts must be positive and ascending")
    return values


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", nargs="+", choices=["zoff", "deepspeed"], default=["deepspeed", "zoff"])
    p.add_argument("--zoff-depths", type=depths, default=depths("112,168,208,224"))
    p.add_argument("--deepspeed-depths", type=depths, default=depths("24,48,72,96"))
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--dir", default="/var/tmp/zoff_capacity", help="both systems' files (removed after each run)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "bench_capacity"))
    p.add_argument("--timeout", type=int, default=5400, help="seconds per run")
    p.add_argument("--build-dir", default="build")
    a = p.parse_args()
    for name in ("steps", "context", "timeout"):
        if getattr(a, name) <= 0:
            raise SystemExit(f"bench_capacity: --{name} {getattr(a, name)}: must be positive")
    os.makedirs(a.out, exist_ok=True)
    ladder, results = Ladder(a), []
    for system in a.systems:
        for depth in getattr(a, f"{system}_depths"):
            r = ladder.run(system, depth)
            results.append(r)
            print(f"{system} {depth} blocks: {'trains' if r['ok'] else 'fails: ' + r['error']} "
                  f"({r['seconds']:.0f} s, peak RSS {r['peak_rss'] / 2**30:.2f} GiB, disk {r['disk'] / 1e9:.1f} GB)",
                  flush=True)
            with open(os.path.join(a.out, "results.json"), "w") as f:
                json.dump(results, f, indent=1)
            if not r["ok"]:
                break
    print_table(results)


if __name__ == "__main__":
    main()
