"""Benchmark: zoff's fused AdamW against every AdamW implementation PyTorch 2.x has on the CPU
(torch.optim.AdamW with foreach=False, the single-tensor loop; foreach=True, the multi-tensor
path; fused=True, ATen's fused CPU kernel), on one fp32 span of --params parameters with
--threads threads, best of --repeats x --steps steps. zoff's figure comes from
`zoff bench optim --json`, run before and after the torch timings (its two figures bound the
drift of this machine's memory bandwidth within the run). Prints the command and the ratios.

    $ZOFF_VENV/bin/python scripts/bench_optim_torch.py --params 50000000
"""
import argparse
import json
import os
import subprocess
import time

import torch


def torch_rate(impl, params, threads, steps, repeats):
    """Best parameters/s of torch.optim.AdamW(**impl) over `repeats` timings of `steps` steps."""
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.randn(params))
    p.grad = torch.randn(params) * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, **impl)
    opt.step()  # allocates the states
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            opt.step()
        best = max(best, params * steps / (time.perf_counter() - start))
    return best


def zoff_rate(exe, a):
    cmd = [exe, "bench", "optim", "--params", str(a.params), "--threads", str(a.threads),
           "--steps", str(a.steps), "--repeats", str(a.repeats), "--json"]
    print("+", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return r["zoff"]["adamw"], r["torch"]["adamw"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=50_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--zoff", default=os.environ.get("ZOFF_EXE", "build/zoff"))
    a = ap.parse_args()
    print(f"torch {torch.__version__}, {a.params} fp32 params, {a.threads} threads, "
          f"best of {a.repeats} x {a.steps} steps", flush=True)
    z_before, libtorch_cpp = zoff_rate(a.zoff, a)
    impls = {"foreach=False (single-tensor)": {"foreach": False},
             "foreach=True (multi-tensor)": {"foreach": True},
             "fused=True (ATen fused kernel)": {"fused": True}}
    rates = {name: torch_rate(kw, a.params, a.threads, a.steps, a.repeats) for name, kw in impls.items()}
    z_after, _ = zoff_rate(a.zoff, a)
    z = (z_before + z_after) / 2
    print(f"zoff fused AdamW: {z / 1e9:.3f} G params/s (before {z_before / 1e9:.3f}, after {z_after / 1e9:.3f})")
    print(f"  vs LibTorch C++ torch::optim::AdamW (zoff bench optim's column): {libtorch_cpp / 1e9:.3f}, "
          f"zoff {z / libtorch_cpp:.2f}x")
    for name, r in rates.items():
        print(f"  vs torch.optim.AdamW {name:32s}: {r / 1e9:.3f} G params/s, zoff {z / r:.2f}x")


if __name__ == "__main__":
    main()
