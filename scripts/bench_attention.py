"""The attention kernels of zoff.nn.causal_attention side by side, one layer's forward and
backward, bf16, one thread: "materialized" (scores, zoff's causal softmax, product with v) and
"flash" (PyTorch's fused scaled_dot_product_attention). Medians of 4 timed calls after one
warm-up, shapes alternating. Outside `zoff train` the materialized path maps its [B heads, T,
T] blocks afresh on every call (the engine keeps them: core/large_block_cache.h), so compare
the kernels inside training with `zoff train --attention` (docs/figures.md, Attention kernels).

    $ZOFF_VENV/bin/python scripts/bench_attention.py [--threads 1]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "python"))
from zoff import nn as znn  # noqa: E402

# (batch, heads, context, head size): gpt small, medium, xl's width, 13b's width, 2048 tokens.
SHAPES = [(8, 6, 256, 64), (4, 6, 512, 64), (2, 14, 512, 64), (2, 6, 1024, 64), (2, 14, 1024, 64),
          (1, 40, 1024, 128), (1, 16, 2048, 128)]


def timed(kernel, B, H, T, hs, calls=5):
    torch.manual_seed(0)
    x = torch.randn(B, T, 3, H, hs, dtype=torch.bfloat16)  # as a GPT splits its qkv output
    q, k, v = (x[:, :, i].transpose(1, 2).detach().requires_grad_() for i in range(3))
    dy = torch.randn(B, H, T, hs, dtype=torch.bfloat16)
    fwd, bwd = [], []
    for _ in range(calls):
        t0 = time.perf_counter()
        y = znn.causal_attention(q, k, v, kernel)
        t1 = time.perf_counter()
        y.backward(dy)
        fwd.append(t1 - t0)
        bwd.append(time.perf_counter() - t1)
    med = lambda ts: sorted(ts[1:])[len(ts[1:]) // 2] * 1e3  # noqa: E731
    return med(fwd), med(bwd)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.threads < 1:
        raise SystemExit(f"bench_attention: --threads {a.threads}: must be >= 1")
    torch.set_num_threads(a.threads)
    print(f"bf16, {a.threads} thread(s), bf16 products widened: {znn.bf16_products_widened()}")
    for B, H, T, hs in SHAPES:
        m, f = timed("materialized", B, H, T, hs), timed("flash", B, H, T, hs)
        print(f"B {B} heads {H:2d} T {T:4d} hs {hs:3d}: materialized {m[0]:6.1f} + {m[1]:6.1f} = "
              f"{sum(m):6.1f} ms, flash {f[0]:6.1f} + {f[1]:6.1f} = {sum(f):6.1f} ms, "
              f"materialized / flash {sum(m) / sum(f):.2f}", flush=True)


if __name__ == "__main__":
    main()
