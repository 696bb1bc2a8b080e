"""Trains the Python GPT of gpt.py on Debian's fortunes through zoff, DeepSpeed style.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/train_gpt.py --steps 200
    build/zoff launch -n 2 -- /usr/bin/python3 examples/python/train_gpt.py --stage 3
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoff  # noqa: E402
from gpt import GPT, PRESETS, batch_windows, fortunes_bytes, gpt_loss  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--stage", type=int, default=2)
    p.add_argument("--batch", type=int, default=16, help="global batch (sequences)")
    p.add_argument("--micro", type=int, default=8, help="micro-batch per rank")
    p.add_argument("--precision", default="bf16", choices=["fp32", "bf16"])
    p.add_argument("--offload", default="cpu", choices=["none", "cpu"])
    p.add_argument("--save", default="", help="checkpoint directory (saved at the end)")
    return p.parse_args()


def config_for(a):
    return {
        "train_batch_size": a.batch,
        "train_micro_batch_size_per_gpu": a.micro,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupCosineLR", "params": {
            "total_num_steps": a.steps, "warmup_num_steps": max(1, a.steps // 10), "warmup_type": "linear"}},
        "zero_optimization": {"stage": a.stage, "offload_optimizer": {"device": a.offload}},
        "bf16": {"enabled": a.precision == "bf16"},
    }


def main():
    a = parse_args()
    torch.manual_seed(0)  # every rank builds the same model (rank 0's weights are used anyway)
    model = GPT(**PRESETS[a.preset])
    engine = zoff.initialize(model=model, config=config_for(a))
    text, block = fortunes_bytes(), PRESETS[a.preset]["block_size"]
    micro, accum = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    t0 = time.time()
    for step in range(a.steps):
        batch = batch_windows(text, step, a.batch, block)
        mine = batch[engine.rank * micro * accum:(engine.rank + 1) * micro * accum]
        for k in range(accum):
            x = mine[k * micro:(k + 1) * micro]
            loss = gpt_loss(engine(x[:, :-1]), x[:, 1:])
            engine.backward(loss)
        stats = engine.step()
        if engine.rank == 0 and (step % 20 == 0 or step == a.steps - 1):
            tok_s = (step + 1) * a.batch * block / (time.time() - t0)
            print(f"step {stats.step:4d}  loss {loss.item():.4f}  lr {stats.lr:.2e}  "
                  f"grad_norm {stats.grad_norm:.3f}  {tok_s:,.0f} tokens/s", flush=True)
    if a.save:
        path = engine.save_checkpoint(a.save)  # collective: every rank writes its shard
        if engine.rank == 0:
            out = os.path.join(a.save, "model.safetensors")
            zoff.export(path, out)
            print(f"saved {path}, exported {out}")


if __name__ == "__main__":
    main()
