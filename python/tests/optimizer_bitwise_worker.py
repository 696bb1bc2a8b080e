"""One process, world 1, fp32, stage 0: zoff's fused optimizers against torch.optim's CPU
implementations (single-tensor, foreach, fused) on the same model and batches, 10 steps.
Prints JSON: per optimizer and implementation, how many final parameters differ and the
largest difference relative to the largest parameter. The SIMD level is ZOFF_SIMD's (set by the test per run)."""
import json
import sys

import torch
from torch import nn

import zoff

STEPS = 10
OPTIMIZERS = {
    "adamw": ("AdamW", dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)),
    "adam": ("Adam", dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
    "sgd": ("SGD", dict(lr=1e-2, momentum=0.9, weight_decay=0.01)),
    "adagrad": ("Adagrad", dict(lr=1e-2, eps=1e-10, weight_decay=0.01)),
}


def model():
    torch.manual_seed(0)  # odd widths: every SIMD level runs its vector loop and its tail
    return nn.Sequential(nn.Linear(37, 129), nn.Tanh(), nn.Linear(129, 11))


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 37, generator=g), torch.randn(8, 11, generator=g)) for _ in range(STEPS)]


def loss_of(out, y):
    return (out - y).square().mean()


def zoff_params(name):
    kind, params = OPTIMIZERS[name]
    torch_params = dict(params)
    if "betas" in torch_params:
        torch_params["betas"] = list(torch_params["betas"])
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
              "optimizer": {"type": kind, "params": torch_params}, "zero_optimization": {"stage": 0}}
    m = model()
    engine = zoff.initialize(model=m, config=config)
    for x, y in batches():
        engine.backward(loss_of(engine(x), y))
        engine.step()
    return torch.cat([p.detach().flatten() for p in engine.full_parameters().values()])


def torch_params(name, impl):
    kind, params = OPTIMIZERS[name]
    m = model()
    flags = {"single": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}[impl]
    opt = getattr(torch.optim, kind)(m.parameters(), **params, **flags)
    for x, y in batches():
        opt.zero_grad()
        loss_of(m(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in dict(m.named_parameters()).values()])


def main():
    out = {}
    for name in OPTIMIZERS:
        got = zoff_params(name)
        for impl in ("single", "foreach", "fused"):
            want = torch_params(name, impl)
            # Relative to the largest parameter: an element near 0 has no meaningful relative error.
            diff = (got.double() - want.double()).abs().max() / want.double().abs().max()
            out[f"{name}/{impl}"] = {"mismatches": int((got != want).sum()), "n": got.numel(),
                                     "max_rel": float(diff)}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
