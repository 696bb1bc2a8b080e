"""zoff's fused optimizers against torch.optim's CPU implementations, 10 steps, fp32, on every
SIMD level this CPU has: bit for bit where zoff follows that implementation's arithmetic,
within a named tolerance of the others. Measured on torch 2.15 (AVX2 and scalar):
- AdamW, Adagrad: bit for bit with fused=True. The single-tensor and foreach AdamW differ in
  the last bits because `torch.sqrt` of a whole tensor goes through MKL's vector math, which
  is not correctly rounded (~20% of elements off by an ulp), where the fused kernels and zoff
  take the correctly rounded square root; a difference then travels through the gradients.
- Adam (L2 weight decay): fused=True adds the decay with an FMA in its vector loop and
  without one in each tensor's scalar tail; zoff's flat shard has no tensor tails, so the last
  few elements of a tensor can differ by an ulp (from step 7 here), then travel.
- SGD (momentum, weight decay): bit for bit with all three."""
import json
import os
import subprocess
import sys

import pytest

from conftest import HERE

# Largest difference, relative to the largest parameter, allowed against implementations zoff
# does not follow bit for bit: a few fp32 ulps after 10 steps.
NEAR_REL_TOL = 1e-5
# (optimizer, torch implementation) pairs that zoff matches bit for bit.
BITWISE = {"adamw/fused", "adagrad/fused", "sgd/single", "sgd/foreach", "sgd/fused"}


def simd_levels():
    import zoff  # noqa: F401  (its import checks the build)
    flags = open("/proc/cpuinfo").read()
    levels = ["scalar"]
    if " avx2 " in flags and " fma " in flags:
        levels.append("avx2")
    if " avx512f " in flags:
        levels.append("avx512")
    return levels


@pytest.mark.parametrize("level", simd_levels())
def test_fused_optimizers_match_torch_optim(level):
    env = dict(os.environ, ZOFF_SIMD=level, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, os.path.join(HERE, "optimizer_bitwise_worker.py")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    results = json.loads(p.stdout)
    for key, r in sorted(results.items()):
        print(f"{level:7s} {key:16s} {r['mismatches']:5d} of {r['n']} differ, max rel {r['max_rel']:.2e}")
    for key, r in results.items():
        if key in BITWISE:
            assert r["mismatches"] == 0, (level, key, r)
        else:
            assert r["max_rel"] <= NEAR_REL_TOL, (level, key, r)
