"""Fine-tunes a pretrained BERT (all-MiniLM-L6-v2, from a PyPI package) to tell Debian's
fortunes apart by category (computers, politics, science, work, songs-poems, people) through
zoff with a DeepSpeed-style config; prints test accuracy per epoch and a confusion table.

    zoff launch -n 2 -- python3 examples/python/bert_classify.py \\
        --config examples/configs/bert_classify_stage2_cpu.json
    python3 examples/python/bert_classify.py --reference \\
        --config examples/configs/bert_classify_stage2_cpu.json    # plain PyTorch AdamW

The example configs' WarmupDecayLR ends at total_num_steps 372 = 3 epochs x 124 steps of
32 fortunes (a different --epochs or batch is noted at the start). The split is fortunes_text's (every 5th fortune of each category is a test example). --reference
trains the same model on the same global batches, with the same schedule, in one process
with torch.optim.AdamW (fp32 master, bf16 autocast when the config enables bf16): the
baseline zoff's accuracy is compared with. Both use zoff.nn's widened bf16 products. Nothing is downloaded (HF_HUB_OFFLINE=1).
"""
import argparse
import json
import os
import sys
import time

import pretrained  # sets HF_HUB_OFFLINE before transformers loads
import torch
import torch.distributed as dist

import fortunes_text
import transformers
from transformers import AutoTokenizer, BertForSequenceClassification
from zoff import nn as znn

EVAL_BATCH = 64  # test rows per forward, per rank


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="DeepSpeed-style JSON config")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=64, help="truncate fortunes to this many tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit-train", type=int, default=0, help="use only this many training fortunes")
    p.add_argument("--reference", action="store_true", help="plain PyTorch AdamW, one process")
    p.add_argument("--save", help="save_pretrained the fine-tuned model (and tokenizer) here")
    p.add_argument("--json-out", help="write per-epoch results here (rank 0)")
    p.add_argument("--nvme-path", help="replaces the config's offload nvme_path values")
    a = p.parse_args(argv)
    for name in ("epochs", "max_tokens"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} = {getattr(a, name)}: must be >= 1")
    if a.limit_train < 0:
        p.error(f"--limit-train = {a.limit_train}: must be >= 0")
    return a


def load_config(path, nvme_path=None):
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"bert_classify: cannot read config {path}: {e}")
    for key in ("offload_param", "offload_optimizer"):
        section = cfg.get("zero_optimization", {}).get(key, {})
        if nvme_path and "nvme_path" in section:
            section["nvme_path"] = nvme_path
    return cfg


def batch_size(cfg):
    if "train_batch_size" not in cfg:
        raise SystemExit("bert_classify: the config needs train_batch_size (the global batch)")
    return int(cfg["train_batch_size"])


def epoch_batches(train, global_batch, epoch, seed):
    """The epoch's global batches (lists of (text, label)), the same on every rank: a seeded
    shuffle, the last partial batch dropped."""
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    rows = [train[i] for i in order.tolist()]
    return [rows[i:i + global_batch] for i in range(0, len(rows) - global_batch + 1, global_batch)]


def encode(tok, rows, max_tokens):
    b = dict(tok([t for t, _ in rows], padding=True, truncation=True, max_length=max_tokens,
                 return_tensors="pt"))
    return b, torch.tensor([y for _, y in rows])


def lr_at(sched, base_lr, step):
    """DeepSpeed's WarmupDecayLR / WarmupLR (linear warmup) at optimizer step `step` (1-based),
    for the reference loop; zoff computes the same schedule from the config itself."""
    if not sched:
        return base_lr
    p, kind = sched.get("params", {}), sched.get("type")
    if kind not in ("WarmupLR", "WarmupDecayLR") or p.get("warmup_type", "log") != "linear":
        raise SystemExit("bert_classify --reference: only WarmupLR / WarmupDecayLR with "
                         "warmup_type linear are reproduced")
    lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", base_lr)
    warmup, i = max(2, p.get("warmup_num_steps", 1000)), step - 1
    if i < warmup:
        gamma = i / warmup
    elif kind == "WarmupDecayLR":
        total = p["total_num_steps"]
        gamma = max(0.0, (total - i) / max(1.0, total - warmup))
    else:
        gamma = 1.0
    return lo + (hi - lo) * gamma


class Trainer:
    """What differs between zoff and the reference: the forward, backward and step."""

    def __init__(self, model, cfg, reference, world, rank):
        self.cfg, self.reference, self.world, self.rank = cfg, reference, world, rank
        self.micro = int(cfg.get("train_micro_batch_size_per_gpu", batch_size(cfg) // world))
        if reference:
            o = cfg["optimizer"]["params"]
            self.model = model
            self.opt = torch.optim.AdamW(model.parameters(), lr=o["lr"],
                                         betas=tuple(o.get("betas", (0.9, 0.999))),
                                         eps=o.get("eps", 1e-8),
                                         weight_decay=o.get("weight_decay", 0.01))
            self.bf16 = cfg.get("bf16", {}).get("enabled", False)
            self.steps = 0
        else:
            import zoff
            self.engine = zoff.initialize(model=model, config=cfg)
            self.model = self.engine

    def forward(self, b, y=None):
        if self.reference and self.bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.model(**b, labels=y)
        return self.model(**b, labels=y)

    def train_step(self, tok, rows, max_tokens):
        """One optimizer step on this rank's rows of the global batch; returns its mean loss."""
        per = len(rows) // self.world
        mine = rows[self.rank * per:(self.rank + 1) * per]
        chunks = [mine[i:i + self.micro] for i in range(0, len(mine), self.micro)]
        total = 0.0
        if self.reference:
            self.steps += 1
            for g in self.opt.param_groups:
                g["lr"] = lr_at(self.cfg.get("scheduler"), self.cfg["optimizer"]["params"]["lr"], self.steps)
            self.opt.zero_grad()
        for rows_k in chunks:
            b, y = encode(tok, rows_k, max_tokens)
            loss = self.forward(b, y).loss
            if self.reference:
                (loss / len(chunks)).backward()
            else:
                self.engine.backward(loss)
            total += loss.item() / len(chunks)
        if self.reference:
            clip = self.cfg.get("gradient_clipping", 0.0)
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            self.opt.step()
        else:
            self.engine.step()
        return total


def evaluate(trainer, tok, test, max_tokens, n_labels):
    """Confusion counts [true, predicted] over the test set: each rank a slice, the same
    number of forward calls on every rank (stage 3 gathers in each), summed across ranks."""
    trainer.model.eval()
    counts = torch.zeros(n_labels, n_labels, dtype=torch.int64)
    span = EVAL_BATCH * trainer.world
    with torch.no_grad():
        for lo in range(0, len(test), span):
            rows = test[lo + trainer.rank * EVAL_BATCH:lo + (trainer.rank + 1) * EVAL_BATCH]
            b, y = encode(tok, rows or test[:1], max_tokens)  # an empty slice still calls forward
            pred = trainer.forward(b).logits.float().argmax(-1)
            if rows:
                counts.index_put_((y, pred), torch.ones_like(y), accumulate=True)
    trainer.model.train()
    if trainer.world > 1:
        dist.all_reduce(counts)
    return counts


def print_confusion(counts, names):
    width = max(len(n) for n in names) + 2
    print("confusion (rows: true category, columns: predicted)")
    print(" " * width + "".join(f"{n[:10]:>11}" for n in names))
    for i, n in enumerate(names):
        print(f"{n:<{width}}" + "".join(f"{int(c):>11}" for c in counts[i]))


def prepare(a, world, rank):
    """The data, config, model (pretrained encoder, seeded classifier) and trainer."""
    train, test = fortunes_text.load_split()
    if a.limit_train:
        train = train[:a.limit_train]
    cfg = load_config(a.config, a.nvme_path)
    steps_per_epoch = len(train) // batch_size(cfg)
    if steps_per_epoch < 1:
        raise SystemExit(f"bert_classify: {len(train)} training fortunes < train_batch_size {batch_size(cfg)}")
    torch.manual_seed(a.seed)  # the new classifier: the same on every rank (and reference)
    model = BertForSequenceClassification.from_pretrained(
        pretrained.minilm_dir(), num_labels=len(fortunes_text.CATEGORIES))
    # bf16 products widened to fp32 GEMMs where the CPU lacks bf16 dot products (PyTorch's
    # own bf16 GEMM is ~30x slower there); the reference uses them too, so that the two runs
    # differ only in the training engine. fp32 is unaffected.
    znn.use_fused_kernels(model)
    torch.manual_seed(a.seed * 7919 + rank + 1)  # dropout: each rank its own stream
    trainer = Trainer(model, cfg, a.reference, world, rank)
    return train, test, cfg, steps_per_epoch, trainer


def train_epochs(a, trainer, tok, train, test, cfg, say):
    """Trains a.epochs epochs, evaluating after each; returns (results, last confusion)."""
    names, majority = fortunes_text.CATEGORIES, fortunes_text.majority_share(test, len(fortunes_text.CATEGORIES))
    results, counts = [], None
    for epoch in range(1, a.epochs + 1):
        start, losses = time.perf_counter(), []
        for rows in epoch_batches(train, batch_size(cfg), epoch, a.seed):
            losses.append(trainer.train_step(tok, rows, a.max_tokens))
        seconds = time.perf_counter() - start
        counts = evaluate(trainer, tok, test, a.max_tokens, len(names))
        acc = counts.diag().sum().item() / counts.sum().item()
        results.append({"epoch": epoch, "train_loss": sum(losses) / len(losses),
                        "test_accuracy": acc, "seconds": seconds})
        say(f"epoch {epoch}: train loss {results[-1]['train_loss']:.4f}, test accuracy "
            f"{100 * acc:.2f}% (majority {100 * majority:.1f}%), {seconds:.0f} s", flush=True)
    return results, counts


def main(argv=None):
    a = parse_args(argv)
    # from_pretrained's report lists the new classifier as missing, as it should be; once.
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    if a.reference and world != 1:
        raise SystemExit(f"bert_classify --reference runs in one process (WORLD_SIZE = {world})")
    if world > 1:
        dist.init_process_group("gloo")  # the example's own group: evaluation counts
    train, test, cfg, steps_per_epoch, trainer = prepare(a, world, rank)
    tok = AutoTokenizer.from_pretrained(pretrained.minilm_dir())
    say = print if rank == 0 else (lambda *x, **k: None)
    majority = fortunes_text.majority_share(test, len(fortunes_text.CATEGORIES))
    say(f"bert_classify: {'reference (torch AdamW)' if a.reference else 'zoff'}, world {world}, "
        f"{len(train)} train / {len(test)} test fortunes, {steps_per_epoch} steps per epoch, "
        f"majority-class accuracy {100 * majority:.1f}%", flush=True)
    total = cfg.get("scheduler", {}).get("params", {}).get("total_num_steps")
    if total and total != a.epochs * steps_per_epoch:
        say(f"note: the schedule's total_num_steps is {total}; this run makes "
            f"{a.epochs * steps_per_epoch} steps")
    results, counts = train_epochs(a, trainer, tok, train, test, cfg, say)
    if rank == 0:
        print_confusion(counts, fortunes_text.CATEGORIES)
    if a.save:
        if a.reference:
            trainer.model.save_pretrained(a.save)
        else:
            trainer.engine.save_pretrained(a.save, overwrite=True)
        if rank == 0:
            tok.save_pretrained(a.save)
            say(f"saved to {a.save}")
    if a.json_out and rank == 0:
        with open(a.json_out, "w") as f:
            json.dump({"epochs": results, "majority": majority, "world": world,
                       "reference": a.reference, "confusion": counts.tolist()}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
