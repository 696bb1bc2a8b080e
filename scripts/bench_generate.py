#!/usr/bin/env python3
"""Generation speed against its memory bound, in one run.

Writes a gpt PRESET model file with random bf16 weights (generation speed does not depend
on the values), then alternates, ROUNDS times: `zoff bench optim --json` (its streaming
probe: the machine's read bandwidth now) and `zoff generate --tokens N` from that file
(weights in RAM, bf16, KV cache). The bound is one read of the bf16 weights per token:
bandwidth / (2 bytes * parameters). Prints tokens/s, the bound and their ratio per round.

  scripts/bench_generate.py [--preset 1.3b] [--tokens 64] [--rounds 2] [--dir /var/tmp]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOFF = os.path.join(ROOT, "build", "zoff")
# The presets' shapes (gpt_preset in include/zoff/models/gpt_config.h): layers, heads, width,
# context. The file's metadata names the preset, so zoff rebuilds and checks the same shapes.
PRESETS = {"small": (8, 6, 384, 256), "medium": (12, 14, 896, 1024),
           "large": (28, 16, 1024, 1024), "1.3b": (26, 32, 2048, 1024),
           "6.7b": (32, 32, 4096, 2048)}
VOCAB = 256


def write_model(path, preset):
    layers, _, width, context = PRESETS[preset]
    gen = torch.Generator().manual_seed(0)

    def normal(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)

    tensors = {"wte.weight": normal(VOCAB, width), "wpe.weight": normal(context, width)}
    for layer in range(layers):
        b = f"blocks.{layer}."
        for ln in ("ln_1", "ln_2"):
            tensors[b + ln + ".weight"] = torch.ones(width, dtype=torch.bfloat16)
            tensors[b + ln + ".bias"] = torch.zeros(width, dtype=torch.bfloat16)
        for name, rows, cols in (("attn.qkv", 3 * width, width), ("attn.proj", width, width),
                                 ("fc", 4 * width, width), ("mlp_proj", width, 4 * width)):
            tensors[b + name + ".weight"] = normal(rows, cols)
            tensors[b + name + ".bias"] = torch.zeros(rows, dtype=torch.bfloat16)
    tensors["ln_f.weight"] = torch.ones(width, dtype=torch.bfloat16)
    tensors["ln_f.bias"] = torch.zeros(width, dtype=torch.bfloat16)
    save_file(tensors, path, metadata={"model": "gpt", "preset": preset,
                                       "context": str(context)})
    return sum(t.numel() for t in tensors.values())


def bandwidth_gbs():
    out = subprocess.run([ZOFF, "bench", "optim", "--json", "--params", "50000000",
                          "--repeats", "3"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def generate(path, tokens):
    run = subprocess.run([ZOFF, "generate", "--checkpoint", path, "--prompt", "The ",
                          "--tokens", str(tokens), "--stream-weights", "no"],
                         check=True, capture_output=True, text=True, errors="replace")
    match = re.search(r"then ([0-9.]+) tokens/s", run.stderr)
    if not match:
        sys.exit(f"bench_generate: no rate in zoff generate's output: {run.stderr}")
    return float(match.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="1.3b", choices=sorted(PRESETS))
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dir", default="/var/tmp")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="zoff-bench-generate-") as tmp:
        path = os.path.join(tmp, f"gpt-{a.preset}.safetensors")
        params = write_model(path, a.preset)
        print(f"gpt {a.preset}: {params / 1e9:.3f}B parameters, {2 * params / 1e9:.2f} GB bf16")
        for r in range(a.rounds):
            probe = bandwidth_gbs()
            gbs = probe_read_gbs(probe)
            rate = generate(path, a.tokens)
            bound = gbs * 1e9 / (2 * params)
            print(f"round {r + 1}: {rate:.2f} tokens/s; read bandwidth {gbs:.1f} GB/s -> bound "
                  f"{bound:.2f} tokens/s; ratio {rate / bound:.2f}")


def probe_read_gbs(probe):
    """Memory traffic in GB/s of zoff bench optim's fp32 Adam streaming probe (the faster of
    its one-pool and OpenMP forms): parameters/s times the bytes each moves."""
    try:
        rate = max(probe["probe"]["adam_fp32"], probe["probe"]["adam_fp32_omp"])
        return rate * probe["bytes_per_param"]["adam"] / 1e9
    except KeyError as e:
        sys.exit(f"bench_generate: zoff bench optim --json lacks {e}")


if __name__ == "__main__":
    main()
