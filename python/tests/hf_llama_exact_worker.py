"""One rank of the uneven-world check for models built without memory: a tiny Hugging Face
Llama (grouped-query attention, tied embeddings, rotary buffers) built under
zoff.init_empty(), valued by param_init from a seeded reference model, trained through zoff
in fp32 at each stage; rank 0 trains the reference with torch.optim.AdamW on the whole
global batches and compares."""
import argparse
import json
import os

import torch
import torch.distributed as dist

import zoff
from parity import relative_differences
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(hidden_size=48, intermediate_size=96, num_hidden_layers=3, num_attention_heads=6,
              num_key_value_heads=2, vocab_size=101, max_position_embeddings=32,
              tie_word_embeddings=True)
GLOBAL_BATCH, MICRO, TOKENS = 6, 1, 10
OPTIM = {"lr": 2e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}


def reference_model():
    torch.manual_seed(11)
    return LlamaForCausalLM(LlamaConfig(**CONFIG))


def batches(steps):
    g = torch.Generator().manual_seed(13)
    return [torch.randint(0, CONFIG["vocab_size"], (GLOBAL_BATCH, TOKENS), generator=g)
            for _ in range(steps)]


def zoff_run(stage, data, start, world, rank):
    with zoff.init_empty():
        model = LlamaForCausalLM(LlamaConfig(**CONFIG))
    z = {"stage": stage, "stage3_param_persistence_threshold": 0, "reduce_bucket_size": 5000}
    engine = zoff.initialize(model=model, param_init=lambda name, v: v.copy_(start[name]), config={
        "train_batch_size": GLOBAL_BATCH, "train_micro_batch_size_per_gpu": MICRO,
        "gradient_clipping": 1.0, "optimizer": {"type": "AdamW", "params": OPTIM},
        "zero_optimization": z})
    per, accum = GLOBAL_BATCH // world, engine.gradient_accumulation_steps()
    losses = []
    for batch in data:
        total = 0.0
        for k in range(accum):
            x = batch[rank * per + k * MICRO:rank * per + (k + 1) * MICRO]
            loss = engine(input_ids=x, labels=x).loss
            engine.backward(loss)
            total += loss.item() / accum
        engine.step()
        t = torch.tensor([total / world], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(t)
        losses.append(t.item())
    return losses, engine.full_parameters()


def reference_run(model, data):
    opt = torch.optim.AdamW(model.parameters(), lr=OPTIM["lr"], betas=OPTIM["betas"],
                            eps=OPTIM["eps"], weight_decay=OPTIM["weight_decay"], fused=True)
    losses = []
    for batch in data:
        opt.zero_grad()
        total = 0.0
        for lo in range(0, GLOBAL_BATCH, MICRO):  # zoff's accumulation: mean of micro losses
            x = batch[lo:lo + MICRO]
            loss = model(input_ids=x, labels=x).loss / (GLOBAL_BATCH // MICRO)
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stages", default="1,3")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo")
    data = batches(a.steps)
    ref = reference_model()
    start = {k: v.detach().clone() for k, v in ref.named_parameters()}
    ref_losses, ref_params = reference_run(ref, data) if rank == 0 else (None, None)
    results = {}
    for stage in (int(s) for s in a.stages.split(",")):
        losses, params = zoff_run(stage, data, start, world, rank)
        if rank == 0:
            results[stage] = {**relative_differences(losses, ref_losses, params, ref_params),
                              "first_loss": losses[0], "last_loss": losses[-1]}
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
