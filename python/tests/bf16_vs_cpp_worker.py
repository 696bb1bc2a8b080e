"""One rank of the bf16 comparison: the Python GPT through zoff (bf16, cpu offload) and zoff's
C++ gpt through the C++ engine, same weights, same micro-batches; rank 0 reports whether
the losses and this rank's fp32 master shards are bitwise equal."""
import argparse
import json
import os

import torch

import tiny_gpt
import zoff
from gpt import gpt_loss
from zoff import _zoff


def python_run(cfg, init, data):
    model = tiny_gpt.model()
    model.load_state_dict(init, strict=False)  # init lacks the tied lm_head.weight
    engine = zoff.initialize(model=model, config=cfg)
    losses = []
    for step in data:  # [accum, micro, T + 1]
        total = 0.0
        for x in step:
            loss = gpt_loss(engine(x[:, :-1]), x[:, 1:])
            engine.backward(loss)
            total += loss.item()
        engine.step()
        losses.append(total / step.size(0))
    return losses, engine._native.master_shard()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--stages", default="2,3")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    world, rank = int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("RANK", 0))
    init = {k: v.detach().clone() for k, v in tiny_gpt.model().named_parameters()}
    mine = torch.stack([tiny_gpt.rank_slice(b, rank, world) for b in tiny_gpt.tokens(a.steps)])
    data = mine.view(a.steps, -1, tiny_gpt.MICRO, mine.size(-1))  # [steps, accum, micro, T + 1]
    results = {}
    for stage in (int(s) for s in a.stages.split(",")):
        cfg = tiny_gpt.config(stage, bf16=True, offload="cpu")
        py_losses, py_master = python_run(cfg, init, data)
        cpp_losses, cpp_master = _zoff._reference_gpt_run(tiny_gpt.TINY, json.dumps(cfg), init, data)
        results[stage] = {"losses_equal": py_losses == cpp_losses,
                          "master_equal": bool(torch.equal(py_master, cpp_master)),
                          "max_loss_diff": max(abs(x - y) for x, y in zip(py_losses, cpp_losses)),
                          "last_loss": py_losses[-1]}
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    main()
