"""One rank of the Hugging Face exactness test: pretrained all-MiniLM-L6-v2 as a
BertForSequenceClassification (or BertForMaskedLM, whose head is tied to the word
embeddings) fine-tuned in fp32 on Debian's fortunes through zoff at each stage, and on rank 0
the same loop with torch.optim.AdamW on the whole global batches. Dropout is off (the check
is exactness); everything else is the model as from_pretrained builds it: its buffers
(position_ids, token_type_ids), padding_idx embeddings, attention masks, the pooler,
keyword-argument forward, ModelOutput results."""
import argparse
import json
import os

import torch
import torch.distributed as dist

import fortunes_text
import pretrained
import zoff
from parity import relative_differences
from transformers import AutoTokenizer, BertForMaskedLM, BertForSequenceClassification

GLOBAL_BATCH, MICRO = 8, 2
MAX_TOKENS = {"cls": 32, "mlm": 16}
MASK_SHARE = 0.15  # MLM: share of non-special tokens masked
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def config(stage):
    z = {"stage": stage, "reduce_bucket_size": 2000000}
    if stage == 3:
        # Every unit sharded and gathered, a few ahead.
        z.update(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=3000000,
                 stage3_max_live_parameters=15000000)
    return {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 5e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
        "zero_optimization": z,
    }


def make_model(kind):
    torch.manual_seed(0)  # the classifier / MLM transform are new: the same on every rank
    if kind == "cls":
        return BertForSequenceClassification.from_pretrained(
            pretrained.minilm_dir(), num_labels=len(fortunes_text.CATEGORIES), **NO_DROPOUT)
    return BertForMaskedLM.from_pretrained(pretrained.minilm_dir(), **NO_DROPOUT)


def batches(kind, steps):
    """Global batches: dicts of [GLOBAL_BATCH, T] tensors (input_ids, token_type_ids,
    attention_mask, labels), padded to the batch's longest fortune."""
    train, _ = fortunes_text.load_split()
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(3)).tolist()
    tok = AutoTokenizer.from_pretrained(pretrained.minilm_dir())
    gen = torch.Generator().manual_seed(5)
    out = []
    for s in range(steps):
        picked = [train[i] for i in order[s * GLOBAL_BATCH:(s + 1) * GLOBAL_BATCH]]
        b = dict(tok([t for t, _ in picked], padding=True, truncation=True,
                     max_length=MAX_TOKENS[kind], return_tensors="pt"))
        if kind == "cls":
            b["labels"] = torch.tensor([y for _, y in picked])
        else:
            maskable = b["attention_mask"].bool() & (b["input_ids"] != tok.cls_token_id) & \
                (b["input_ids"] != tok.sep_token_id)
            masked = maskable & (torch.rand(b["input_ids"].shape, generator=gen) < MASK_SHARE)
            masked[:, 1] |= maskable[:, 1]  # at least one masked token per row
            b["labels"] = torch.where(masked, b["input_ids"], torch.full_like(b["input_ids"], -100))
            b["input_ids"] = torch.where(masked, torch.full_like(b["input_ids"], tok.mask_token_id),
                                         b["input_ids"])
        out.append(b)
    return out


def rows(batch, lo, hi):
    return {k: v[lo:hi] for k, v in batch.items()}


def zoff_run(kind, stage, data, world, rank):
    model = make_model(kind)
    engine = zoff.initialize(model=model, config=config(stage))
    micro, accum = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    per = GLOBAL_BATCH // world
    losses = []
    for batch in data:
        total = 0.0
        for k in range(accum):
            lo = rank * per + k * micro
            out = engine(**rows(batch, lo, lo + micro))
            engine.backward(out.loss)
            total += out.loss.item() / accum
        engine.step()
        t = torch.tensor([total / world], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(t)  # the user's own process group
        losses.append(t.item())
    return losses, engine.full_parameters(), len(engine._scopes._handles) // 2


def reference_run(kind, data):
    model = make_model(kind)
    p = config(0)["optimizer"]["params"]
    # fused=True: the implementation whose arithmetic zoff's kernel follows bit for bit.
    opt = torch.optim.AdamW(model.parameters(), lr=p["lr"], betas=p["betas"], eps=p["eps"],
                            weight_decay=p["weight_decay"], fused=True)
    losses = []
    for batch in data:
        # The micro-batches' mean loss, as zoff's accumulation computes it (the MLM loss is a
        # mean over masked tokens per micro-batch, not over the whole batch).
        opt.zero_grad()
        total = 0.0
        for lo in range(0, GLOBAL_BATCH, MICRO):
            loss = model(**rows(batch, lo, lo + MICRO)).loss / (GLOBAL_BATCH // MICRO)
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(total)
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--model", choices=["cls", "mlm"], default="cls")
    a.add_argument("--stages", default="0,1,2,3")
    a.add_argument("--steps", type=int, default=30)
    a.add_argument("--out", required=True)
    a = a.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if world > 1:
        dist.init_process_group("gloo")
    data = batches(a.model, a.steps)
    results = {}
    ref_losses, ref_params = reference_run(a.model, data) if rank == 0 else (None, None)
    for stage in (int(s) for s in a.stages.split(",")):
        losses, params, hooked = zoff_run(a.model, stage, data, world, rank)
        if rank != 0:
            continue
        results[stage] = {**relative_differences(losses, ref_losses, params, ref_params),
                          "first_loss": sum(losses[:5]) / 5, "last_loss": sum(losses[-5:]) / 5,
                          "hooked_units": hooked}
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
