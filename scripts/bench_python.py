"""One rank of scripts/bench_python.sh: trains the Python GPT for --steps steps either through
zoff (bf16, ZeRO --stage, cpu offload) or with DDP + torch.optim.AdamW under
torch.autocast("cpu", bfloat16) on gloo, and prints rank 0's median tokens/s (steps after
--warmup) as one JSON line, with the median ms of each phase of the step ("times_ms": forward
with the loss, backward, step; through zoff also the engine's parts of them)."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "python"))
from gpt import GPT, PRESETS, batch_windows, fortunes_bytes, gpt_loss  # noqa: E402

LR, BETAS, WD = 3e-4, (0.9, 0.95), 0.1


def zoff_steps(a, model, text, world, rank):
    import zoff
    cfg = {"train_batch_size": a.batch, "train_micro_batch_size_per_gpu": a.batch // world,
           "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "betas": list(BETAS), "weight_decay": WD}},
           # Buckets as in examples/configs/gpt_small_bf16_stage2.json (DDP's default is 25 MB
           # of fp32, 6.25M parameters): DeepSpeed's default 5e8 is one bucket for this model,
           # which leaves the whole reduce-scatter after backward.
           "zero_optimization": {"stage": a.stage, "offload_optimizer": {"device": a.offload},
                                 "reduce_bucket_size": 5000000, "overlap_comm": True},
           "bf16": {"enabled": True}}
    engine = zoff.initialize(model=model, config=cfg)
    for step in range(a.steps):
        x = batch_windows(text, step, a.batch, a.block).chunk(world)[rank]
        start = time.perf_counter()
        loss = gpt_loss(engine(x[:, :-1]), x[:, 1:])
        forward_ms = (time.perf_counter() - start) * 1e3
        engine.backward(loss)
        engine.step()
        yield {**engine.step_times(), "forward": forward_ms}  # forward with the loss, as ddp's


def ddp_steps(a, model, text, world, rank):
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=LR, betas=BETAS, weight_decay=WD)
    for step in range(a.steps):
        x = batch_windows(text, step, a.batch, a.block).chunk(world)[rank]
        t0 = time.perf_counter()
        # ddp: bf16 under autocast; ddp_fp32: fp32 throughout (what a user of a CPU without
        # bf16 dot products runs: ATen's generic bf16 GEMM is ~50x slower than fp32 there).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "ddp"):
            loss = gpt_loss(ddp(x[:, :-1]), x[:, 1:])
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP's bucketed allreduce overlaps it and is waited for at its end
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        yield {"forward": (t1 - t0) * 1e3, "backward": (t2 - t1) * 1e3, "step": (t3 - t2) * 1e3}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["zoff", "ddp", "ddp_fp32"], required=True)
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences)")
    p.add_argument("--stage", type=int, default=2)
    p.add_argument("--offload", default="cpu", choices=["none", "cpu"],
                   help="zoff's zero_optimization.offload_optimizer.device")
    p.add_argument("--profile", default="", help="write rank 0's per-op CPU profile of "
                   "--profile-steps steps after --warmup to this file (zoff.OpProfile, both "
                   "modes: torch.profiler slows CPU steps down, see its docstring)")
    p.add_argument("--profile-steps", type=int, default=5)
    a = p.parse_args()
    a.block = PRESETS[a.preset]["block_size"]
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    if os.environ.get("ZOFF_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["ZOFF_NUM_THREADS"]))
    if a.mode.startswith("ddp"):
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model, text = GPT(**PRESETS[a.preset]), fortunes_bytes()
    steps = (zoff_steps if a.mode == "zoff" else ddp_steps)(a, model, text, world, rank)
    times, phases, t = [], [], time.perf_counter()
    prof = None
    for i, phase_ms in enumerate(steps):
        phases.append(phase_ms)
        now = time.perf_counter()
        times.append(now - t)
        if a.profile and i + 1 == a.warmup:  # steps a.warmup .. a.warmup + profile_steps - 1
            import zoff
            prof = zoff.OpProfile(steps=a.profile_steps)
            prof.start()
        if prof is not None and i + 1 == a.warmup + a.profile_steps:
            prof.stop()
            if rank == 0:
                prof.write(a.profile)
            prof = None
        t = time.perf_counter()
    if rank == 0:
        tok_s = a.batch * a.block / statistics.median(times[a.warmup:])
        measured = phases[a.warmup:]
        times_ms = {k: statistics.median(p[k] for p in measured) for k in measured[0]}
        print(json.dumps({"mode": a.mode, "tokens_per_s": tok_s, "steps": a.steps,
                          "times_ms": times_ms}), flush=True)


if __name__ == "__main__":
    main()
