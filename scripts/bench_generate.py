#!/usr/bin/env python3
"""Generation speed against its memory bound, in one run.

Writes a gpt PRESET model file with random bf16 weights (generation speed does not depend
on the values), then alternates, ROUNDS times: `zoff bench memory --json` (the machine's
read bandwidth now: generation reads each weight once per token and writes next to
nothing), `zoff generate --tokens N` from that file (weights in RAM, bf16, KV cache) and
`zoff bench optim --json` (the Adam streaming probe's read + write traffic, the figure used
before `bench memory` existed; reads and writes together move more bytes per second here
than reads alone). The bound is one read of the bf16 weights per token: read bandwidth /
(2 bytes * parameters). Prints tokens/s, both bounds and the ratios per round.

--from-disk (root: it empties the page cache) measures streamed generation from the file
instead: each round drops the page cache and reads the file with fio (O_DIRECT, the disk's
read bandwidth now), then drops the page cache and runs `zoff generate --stream-weights
yes` with direct reads and read-ahead, direct reads without read-ahead, and buffered reads
with read-ahead: its prompt's forward is one pass over the weights from the disk (the
bound: disk bandwidth / file bytes); with direct reads every token after it is another
pass from the disk, buffered ones find what the page cache kept.

  scripts/bench_generate.py [--preset 1.3b] [--tokens 64] [--rounds 2] [--dir /var/tmp]
                            [--from-disk]
"""
import argparse
import json
import math
import os
import re
import struct
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOFF = os.path.join(ROOT, "build", "zoff")
# The presets' shapes (gpt_preset in include/zoff/models/gpt_config.h): layers, heads, width,
# context. The file's metadata names the preset, so zoff rebuilds and checks the same shapes.
PRESETS = {"small": (8, 6, 384, 256), "medium": (12, 14, 896, 1024),
           "large": (28, 16, 1024, 1024), "1.3b": (26, 32, 2048, 1024),
           "6.7b": (32, 32, 4096, 2048), "13b": (40, 40, 5120, 2048)}
VOCAB = 256


def model_tensors(preset):
    """(name, shape, fill) of every tensor of the gpt preset; fill is "normal", "ones" or
    "zeros"."""
    layers, _, width, context = PRESETS[preset]
    out = [("wte.weight", (VOCAB, width), "normal"), ("wpe.weight", (context, width), "normal")]
    for layer in range(layers):
        b = f"blocks.{layer}."
        for ln in ("ln_1", "ln_2"):
            out += [(b + ln + ".weight", (width,), "ones"), (b + ln + ".bias", (width,), "zeros")]
        for name, rows, cols in (("attn.qkv", 3 * width, width), ("attn.proj", width, width),
                                 ("fc", 4 * width, width), ("mlp_proj", width, 4 * width)):
            out += [(b + name + ".weight", (rows, cols), "normal"),
                    (b + name + ".bias", (rows,), "zeros")]
    return out + [("ln_f.weight", (width,), "ones"), ("ln_f.bias", (width,), "zeros")]


def write_model(path, preset):
    """Writes the safetensors file one tensor at a time (a 13b model is larger than RAM):
    the header first, from the shapes, then each tensor's bf16 bytes. Returns the number of
    parameters."""
    tensors = model_tensors(preset)
    header, offset = {}, 0
    for name, shape, _ in tensors:
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"model": "gpt", "preset": preset,
                              "context": str(PRESETS[preset][3])}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    gen = torch.Generator().manual_seed(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, fill in tensors:
            if fill == "normal":
                t = (torch.randn(*shape, generator=gen) * 0.02).to(torch.bfloat16)
            else:
                t = (torch.ones if fill == "ones" else torch.zeros)(*shape, dtype=torch.bfloat16)
            f.write(t.view(torch.int16).numpy().tobytes())
    return sum(math.prod(shape) for _, shape, _ in tensors)


def bandwidth_gbs():
    out = subprocess.run([ZOFF, "bench", "optim", "--json", "--params", "50000000",
                          "--repeats", "3"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def read_gbs():
    """Median GB/s of zoff bench memory's read passes over 1 GiB (past the caches)."""
    out = subprocess.run([ZOFF, "bench", "memory", "--json"], check=True, capture_output=True,
                         text=True).stdout
    try:
        return json.loads(out)["median_gbs"]
    except (KeyError, ValueError) as e:
        sys.exit(f"bench_generate: zoff bench memory --json gave no median_gbs ({e}): {out}")


def generate(path, tokens, extra=("--stream-weights", "no")):
    """(seconds of the prompt's forward and first byte, tokens/s after it)."""
    run = subprocess.run([ZOFF, "generate", "--checkpoint", path, "--prompt", "The ",
                          "--tokens", str(tokens), *extra],
                         check=True, capture_output=True, text=True, errors="replace")
    match = re.search(r"first byte ([0-9.]+) s, then ([0-9.]+) tokens/s", run.stderr)
    if not match:
        sys.exit(f"bench_generate: no rate in zoff generate's output: {run.stderr}")
    return float(match.group(1)), float(match.group(2))


def drop_page_cache():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError as e:
        sys.exit(f"bench_generate: --from-disk empties the page cache and cannot: {e}")


def disk_read_gbs(path):
    """fio: one sequential O_DIRECT read of the whole file, 4 MiB blocks, 8 in flight."""
    out = subprocess.run(["fio", "--name=read", f"--filename={path}", "--rw=read",
                          "--bs=4M", "--direct=1", "--ioengine=io_uring", "--iodepth=8",
                          "--readonly", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["jobs"][0]["read"]["bw_bytes"] / 1e9


def from_disk_round(r, path, tokens):
    drop_page_cache()
    gbs = disk_read_gbs(path)
    size = os.path.getsize(path)
    bound = gbs * 1e9 / size
    print(f"round {r + 1}: disk read {gbs:.2f} GB/s (fio, O_DIRECT) -> bound {bound:.3f} "
          f"passes/s over the {size / 1e9:.2f} GB file")
    for label, extra in (("direct reads, read-ahead", ("--direct-reads", "yes")),
                         ("direct reads, no read-ahead", ("--direct-reads", "yes",
                                                          "--no-read-ahead")),
                         ("buffered reads, read-ahead", ("--direct-reads", "no"))):
        drop_page_cache()
        first, rate = generate(path, tokens, ("--stream-weights", "yes", *extra))
        print(f"  {label}: first pass (cold: nothing is read ahead before the order is "
              f"learnt) {first:.2f} s = {1 / first / bound:.2f} of the bound; then "
              f"{rate:.3f} tokens/s = {rate / bound:.2f} of the bound (buffered: from the page "
              f"cache where the file fits in RAM)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="1.3b", choices=sorted(PRESETS))
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--from-disk", action="store_true",
                   help="streamed generation from the file against the disk's bandwidth")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="zoff-bench-generate-") as tmp:
        path = os.path.join(tmp, f"gpt-{a.preset}.safetensors")
        params = write_model(path, a.preset)
        print(f"gpt {a.preset}: {params / 1e9:.3f}B parameters, {2 * params / 1e9:.2f} GB bf16")
        for r in range(a.rounds):
            if a.from_disk:
                from_disk_round(r, path, a.tokens)
                continue
            read = read_gbs()
            _, rate = generate(path, a.tokens)
            traffic = probe_read_gbs(bandwidth_gbs())
            bound = read * 1e9 / (2 * params)
            traffic_bound = traffic * 1e9 / (2 * params)
            print(f"round {r + 1}: {rate:.2f} tokens/s; read bandwidth {read:.1f} GB/s "
                  f"(zoff bench memory) -> bound {bound:.2f} tokens/s, ratio {rate / bound:.2f}; "
                  f"Adam probe traffic {traffic:.1f} GB/s -> {traffic_bound:.2f} tokens/s, "
                  f"ratio {rate / traffic_bound:.2f}")


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
