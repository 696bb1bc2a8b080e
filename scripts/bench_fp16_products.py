"""Benchmark: one linear layer's forward and backward at gpt small's shape ([8 x 256, 384] x
[384, 1536]) in fp32, bf16, LibTorch's own fp16, and fp16 widened to fp32 (zoff's
widened_products: cast, fp32 GEMM, round once), alternating rounds in one run. Prints
GFLOP/s per variant, the ratios, and the widened product's difference from the pure-fp16 one.
Run: $ZOFF_VENV/bin/python scripts/bench_fp16_products.py [--threads 2] [--rounds 5]"""
import argparse
import statistics
import time

import torch


def linear_widened(x, w, b):
    return torch.nn.functional.linear(x.float(), w.float(), b.float()).half()


def step(fn, x, w, b):
    x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
    y = fn(x, w, b)
    y.backward(torch.ones_like(y))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m, k, n = 8 * 256, 384, 1536
    x32, w32, b32 = torch.randn(m, k), torch.randn(n, k) * 0.05, torch.randn(n)
    variants = {
        "fp32": (torch.nn.functional.linear, torch.float32),
        "bf16": (torch.nn.functional.linear, torch.bfloat16),
        "fp16 widened": (linear_widened, torch.float16),
        "fp16 LibTorch": (torch.nn.functional.linear, torch.float16),
    }
    flops = 3 * 2 * m * k * n  # forward + the two backward products
    times = {name: [] for name in variants}
    for _ in range(a.rounds):
        for name, (fn, dtype) in variants.items():
            args = [t.to(dtype) for t in (x32, w32, b32)]
            reps = 1 if name == "fp16 LibTorch" else 5
            step(fn, *args)  # warm-up
            t = time.perf_counter()
            for _ in range(reps):
                step(fn, *args)
            times[name].append((time.perf_counter() - t) / reps)
    gflops = {name: flops / statistics.median(v) / 1e9 for name, v in times.items()}
    print(f"linear [{m}, {k}] x [{k}, {n}], forward + backward, {a.threads} threads, "
          f"median of {a.rounds} alternating rounds:")
    for name, g in gflops.items():
        print(f"  {name:14s} {g:8.1f} GFLOP/s")
    print(f"  fp16 widened / bf16 {gflops['fp16 widened'] / gflops['bf16']:.2f}x, / fp32 "
          f"{gflops['fp16 widened'] / gflops['fp32']:.2f}x, / LibTorch fp16 "
          f"{gflops['fp16 widened'] / gflops['fp16 LibTorch']:.0f}x")
    xh, wh, bh = (t.half() for t in (x32, w32, b32))
    wide = linear_widened(xh, wh, bh).float()
    pure = torch.nn.functional.linear(xh, wh, bh).float()
    exact = torch.nn.functional.linear(xh.double(), wh.double(), bh.double())
    ulp = torch.finfo(torch.float16).eps
    print(f"  widened vs pure fp16: {(wide != pure).float().mean() * 100:.2f}% of outputs differ; "
          f"max |diff| / |y| {((wide - pure).abs() / pure.abs().clamp_min(1e-3)).max() / ulp:.2f} fp16 ulps")
    for name, y in (("widened", wide), ("pure fp16", pure)):
        err = ((y.double() - exact).abs() / exact.abs().clamp_min(1e-3)).mean() / ulp
        print(f"  {name:9s} mean error vs the exact product: {err:.3f} fp16 ulps")


if __name__ == "__main__":
    main()
