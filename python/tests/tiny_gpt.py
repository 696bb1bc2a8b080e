"""The tiny GPT and configs the Python tests train (small enough for CI on 2 cores)."""
import torch

from gpt import GPT, batch_windows, fortunes_bytes

TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=256)
GLOBAL_BATCH, MICRO = 8, 2


def config(stage, bf16=False, offload="none", world_size=1):
    z = {"stage": stage, "reduce_bucket_size": 20000}
    if offload != "none":
        z["offload_optimizer"] = {"device": offload}
    if stage == 3:
        # Every unit sharded and gathered (the tiny units are below the default threshold).
        z.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=20000,
                 stage3_max_live_parameters=30000)
    return {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 3e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
        "zero_optimization": z,
        "bf16": {"enabled": bf16},
    }


def model(seed=1):
    torch.manual_seed(seed)
    return GPT(**TINY)


def tokens(steps, seed=7):
    """int64 [steps, GLOBAL_BATCH, block_size + 1]: windows of Debian's fortunes text."""
    text = fortunes_bytes()
    return torch.stack([batch_windows(text, s, GLOBAL_BATCH, TINY["block_size"], seed)
                        for s in range(steps)])


def rank_slice(batch, rank, world):
    per = batch.size(0) // world
    return batch[rank * per:(rank + 1) * per]
