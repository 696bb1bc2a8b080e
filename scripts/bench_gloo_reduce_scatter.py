#!/usr/bin/env python3
"""Benchmark: Gloo's own reduce-scatter in PyTorch 2.x against the all-to-all zoff sends.

Why: zoff's Gloo transport reduce-scatters a gradient bucket by an all-to-all of 1/world
slices, each rank summing the slices it receives in rank order (src/dist/gloo_comm.cpp).
PyTorch 2.x's Gloo backend has a native reduce_scatter, but it is an all-reduce of the whole
bucket underneath. This times both, same run, same tensors, and checks they agree.

Run with the project's venv, two ranks on this machine (gloo over loopback):
  $ZOFF_VENV/bin/python scripts/bench_gloo_reduce_scatter.py [--sizes-mib 4 16 64] [--reps 5]
Prints ms per call (median of --reps after one warm-up) and the ratio native / all-to-all.
"""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT_S = 120  # every collective: a stuck peer fails the run instead of hanging it
# Two ranks: both add the same two fp32 values, bit-equal. More: Gloo's ring all-reduce adds
# in its own order, zoff in rank order; they differ by rounding only.
ORDER_RTOL = 1e-6


def all_to_all_reduce_scatter(bucket: torch.Tensor, world: int) -> torch.Tensor:
    """zoff's scheme: rank r receives every rank's slice r, then sums them in rank order."""
    received = torch.empty_like(bucket)
    dist.all_to_all_single(received, bucket)
    parts = received.view(world, -1)
    out = parts[0].clone()
    for r in range(1, world):
        out.add_(parts[r])
    return out


def native_reduce_scatter(bucket: torch.Tensor, world: int) -> torch.Tensor:
    out = torch.empty(bucket.numel() // world, dtype=bucket.dtype)
    dist.reduce_scatter_tensor(out, bucket)
    return out


def time_ms(fn, bucket, world, reps):
    fn(bucket, world)  # warm-up: first touch of the output, Gloo's pairs
    times = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter()
        fn(bucket, world)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def worker(rank, world, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(1)  # one core per rank, as zoff launch gives each rank
    from datetime import timedelta
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=TIMEOUT_S))
    gen = torch.Generator().manual_seed(rank)
    for mib in args.sizes_mib:
        n = (mib << 20) // 4 // world * world
        bucket = torch.randn(n, generator=gen)
        a = native_reduce_scatter(bucket, world)
        b = all_to_all_reduce_scatter(bucket, world)
        diff = (a - b).abs().max().item()
        bound = 0.0 if world == 2 else ORDER_RTOL * b.abs().max().item()
        if diff > bound:
            raise SystemExit(f"rank {rank}: native and all-to-all differ by {diff} at {mib} MiB")
        native = time_ms(native_reduce_scatter, bucket, world, args.reps)
        a2a = time_ms(all_to_all_reduce_scatter, bucket, world, args.reps)
        if rank == 0:
            # Bytes each rank sends: an all-reduce (ring: 2 (w-1)/w of the bucket), an
            # all-to-all ((w-1)/w of it).
            print(f"{mib:5d} MiB  max difference {diff:.1e}  native reduce_scatter {native:8.2f} ms   all-to-all + sum "
                  f"{a2a:8.2f} ms   native / all-to-all {native / a2a:5.2f}x", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes-mib", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--world", type=int, default=2)
    args = p.parse_args()
    if args.world < 2 or any(s <= 0 for s in args.sizes_mib) or args.reps <= 0:
        raise SystemExit(f"bench_gloo_reduce_scatter: bad arguments {vars(args)}")
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "29581")
    print(f"torch {torch.__version__}, gloo, world {args.world}, fp32 buckets, "
          f"median of {args.reps}")
    mp.spawn(worker, args=(args.world, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
