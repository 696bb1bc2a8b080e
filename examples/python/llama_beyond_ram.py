"""Trains a Hugging Face LlamaForCausalLM larger than this machine's RAM: built under
zoff.init_empty() (no parameter memory), valued unit by unit by the model's own
_init_weights, trained at ZeRO stage 3 with its bf16 parameters, fp32 master and int8
optimizer states on disk. Text: Debian's fortunes, tokenized with all-MiniLM-L6-v2's
WordPiece tokenizer (its vocabulary is the model's).

    python3 examples/python/llama_beyond_ram.py --nvme-path /var/tmp/zoff-llama \
        --same-batch --lr 1e-4                                                        # 6.3B
    python3 examples/python/llama_beyond_ram.py --layers 2 --hidden 64 --intermediate 128 \\
        --heads 4 --nvme-path /tmp/llama-tiny                                         # seconds

Prints each step's loss, time and phase breakdown, the peak RSS of the process and the
bytes on disk. What bounds the peak RSS: the units whole at once (a decoder layer in bf16,
stage3_max_live_parameters), one unit's fp32 gradients, the optimizer's sub-group buffers
(sub_group_size) and the disk tier's read-ahead (offload_param.max_in_cpu), plus PyTorch
itself; not the model's size.
"""
import argparse
import json
import os
import resource
import sys
import time

import pretrained  # sets HF_HUB_OFFLINE before transformers loads
import torch

import fortunes_text
import transformers
import zoff
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from zoff import nn as znn


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=11008)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--context", type=int, default=64, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0, help="seeds the initial values")
    p.add_argument("--same-batch", action="store_true",
                   help="every step on the first window (a falling loss shows the update's direction)")
    p.add_argument("--nvme-path", required=True, help="folder for the disk tier (created)")
    p.add_argument("--json-out", help="write the figures here")
    a = p.parse_args(argv)
    for name in ("layers", "hidden", "intermediate", "heads", "context", "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name} = {getattr(a, name)}: must be >= 1")
    if a.hidden % a.heads:
        p.error(f"--hidden = {a.hidden} is not a multiple of --heads = {a.heads}")
    return a


def ds_config(nvme, lr):
    # Gradients streamed to the optimizer as backward makes them (no clipping: it would need
    # every gradient first), so no whole gradient shard ever exists.
    return {
        "train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "state_dtype": "int8",
                      "params": {"lr": lr, "betas": [0.9, 0.95], "weight_decay": 0.1}},
        "zero_optimization": {
            "stage": 3, "sub_group_size": 10000000, "reduce_bucket_size": 100000000,
            "offload_optimizer": {"device": "nvme", "nvme_path": nvme, "gradients": "stream"},
            "offload_param": {"device": "nvme", "nvme_path": nvme, "max_in_cpu": 250000000}},
    }


def token_batches(tok, context, steps):
    """[1, context] windows of the fortunes' WordPiece tokens, one per step."""
    train, _ = fortunes_text.load_split()
    ids = tok("\n".join(t for t, _ in train[:400]), add_special_tokens=False)["input_ids"]
    if len(ids) < context * steps:
        raise SystemExit(f"llama_beyond_ram: {len(ids)} tokens < {context} x {steps}")
    return [torch.tensor([ids[s * context:(s + 1) * context]]) for s in range(steps)]


def disk_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def main(argv=None):
    a = parse_args(argv)
    transformers.utils.logging.set_verbosity_error()
    os.makedirs(a.nvme_path, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(pretrained.minilm_dir())
    cfg = LlamaConfig(vocab_size=tok.vocab_size, hidden_size=a.hidden, intermediate_size=a.intermediate,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.heads,
                      max_position_embeddings=max(a.context, 64), tie_word_embeddings=False)
    torch.manual_seed(a.seed)  # _init_weights draws from it (rank 0's values are used)
    start = time.perf_counter()
    with zoff.init_empty():
        model = LlamaForCausalLM(cfg)
    znn.use_fused_kernels(model)  # widened bf16 products where the CPU lacks bf16 dot products
    n_params = sum(p.numel() for p in model.parameters())
    print(f"llama: {n_params / 1e9:.3f}B parameters ({a.layers} layers, width {a.hidden}), built in "
          f"{time.perf_counter() - start:.1f} s, RSS peak so far {peak_rss_gib():.2f} GiB", flush=True)
    start = time.perf_counter()
    engine = zoff.initialize(model=model, config=ds_config(a.nvme_path, a.lr))
    setup_s = time.perf_counter() - start
    print(f"zoff.initialize: {setup_s:.0f} s (values written to disk unit by unit), "
          f"{disk_bytes(a.nvme_path) / 1e9:.2f} GB on disk, RSS peak {peak_rss_gib():.2f} GiB", flush=True)
    steps = []
    batches = token_batches(tok, a.context, a.steps)
    if a.same_batch:
        batches = [batches[0]] * a.steps
    for s, x in enumerate(batches, 1):
        t0 = time.perf_counter()
        loss = engine(input_ids=x, labels=x).loss
        engine.backward(loss)
        stats = engine.step()
        times = {k: round(v / 1e3, 1) for k, v in engine.step_times().items()}
        steps.append({"step": s, "loss": loss.item(), "seconds": time.perf_counter() - t0,
                      "lr": stats.lr, "phases_s": times})
        print(f"step {s}: loss {loss.item():.4f}, {steps[-1]['seconds']:.0f} s, phases (s) {times}, "
              f"RSS peak {peak_rss_gib():.2f} GiB", flush=True)
    figures = {"parameters": n_params, "setup_s": setup_s, "steps": steps,
               "peak_rss_gib": peak_rss_gib(), "disk_bytes": disk_bytes(a.nvme_path)}
    print(f"peak RSS {figures['peak_rss_gib']:.2f} GiB, {figures['disk_bytes'] / 1e9:.2f} GB on disk")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
