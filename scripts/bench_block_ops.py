#!/usr/bin/env python3
"""Per-op time of gpt 1.3b's blocks (26, each its own weights, in turn)'s cached forward for one new position, bf16, in plain
PyTorch (the kernels zoff's LibTorch calls): what a token costs without zoff's own code.
  $ZOFF_VENV/bin/python scripts/bench_block_ops.py [PAST_POSITIONS, default 100]
"""
import time, torch, torch.nn.functional as F
torch.manual_seed(0)
C, nh, T = 2048, 32, int(__import__('sys').argv[1]) if len(__import__('sys').argv) > 1 else 100
hs = C // nh
bf = torch.bfloat16
L = 26  # the model's blocks, each its own weights: one block's 100 MB alone would sit in L3
Ws = [{n: (torch.randn(r, c) * 0.02).to(bf) for n, r, c in
       (("qkv", 3 * C, C), ("proj", C, C), ("fc", 4 * C, C), ("mlp", C, 4 * C))}
      for _ in range(L)]
B = {n: torch.zeros(Ws[0][n].shape[0], dtype=bf) for n in Ws[0]}
ln = (torch.ones(C, dtype=bf), torch.zeros(C, dtype=bf))
keys = torch.zeros(1, nh, 1024, hs, dtype=bf); values = torch.zeros_like(keys)
x = torch.randn(1, 1, C).to(bf)
times = {}
def t(name, fn):
    s = time.perf_counter(); r = fn(); times[name] = times.get(name, 0) + time.perf_counter() - s; return r
def block(x, past, W):
    h = t("ln1", lambda: F.layer_norm(x, (C,), *ln))
    qkv = t("qkv", lambda: F.linear(h, W["qkv"], B["qkv"]))
    q, k, v = t("split", lambda: qkv.split(C, 2))
    heads = lambda p: p.view(1, 1, nh, hs).transpose(1, 2)
    t("cache_k", lambda: keys.narrow(2, past, 1).copy_(heads(k)))
    t("cache_v", lambda: values.narrow(2, past, 1).copy_(heads(v)))
    K, V = keys.narrow(2, 0, past + 1), values.narrow(2, 0, past + 1)
    sc = t("qk", lambda: torch.matmul(heads(q), K.transpose(2, 3)).float() * (1 / hs ** 0.5))
    att = t("softmax", lambda: torch.softmax(sc, -1).to(bf))
    y = t("av", lambda: torch.matmul(att, V))
    y = t("merge", lambda: y.transpose(1, 2).contiguous().view(1, 1, C))
    y = t("proj", lambda: F.linear(y, W["proj"], B["proj"]))
    x = t("add1", lambda: x + y)
    h = t("ln2", lambda: F.layer_norm(x, (C,), *ln))
    h = t("fc", lambda: F.linear(h, W["fc"], B["fc"]))
    h = t("gelu", lambda: F.gelu(h, approximate="tanh"))
    h = t("mlp", lambda: F.linear(h, W["mlp"], B["mlp"]))
    return t("add2", lambda: x + h)
with torch.no_grad():
    for past in range(T): x = block(x, past, Ws[past % L])
    times.clear(); s = time.perf_counter()
    n = 10 * L
    for i in range(n): x = block(x, T - 1, Ws[i % L])
    total = time.perf_counter() - s
print(f"threads {torch.get_num_threads()} T {T}: one block {total / n * 1e3:.3f} ms, x26 = {total / n * 26e3:.1f} ms/token")
for k, v in sorted(times.items(), key=lambda kv: -kv[1]):
    print(f"  {k:8s} {v / n * 1e6:8.1f} us  {v / total * 100:5.1f}%")
