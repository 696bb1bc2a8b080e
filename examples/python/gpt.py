"""A byte-level GPT in plain PyTorch, op for op the same as zoff's C++ gpt (src/models/gpt.cpp),
and the text of Debian's fortunes as its data. Nothing here needs zoff: where zoff imports,
bf16 LayerNorm and GELU take its fused kernels, attention is the C++ gpt's own function
(zoff.nn.causal_attention: zoff's causal softmax, or PyTorch's flash attention for long bf16
windows), and the matrix products its widened 16-bit products where the CPU lacks bf16 dot
products (zoff.nn), as the C++ gpt does. Whichever training system runs it (zoff, DDP, FSDP2, DeepSpeed), the model
computes the same way."""
import math
import os

import torch
from torch import nn
from torch.nn import functional as F

try:  # zoff's fused bf16 CPU kernels where zoff imports; plain PyTorch otherwise
    from zoff import nn as zoff_nn
except ImportError:
    zoff_nn = None
gelu = zoff_nn.gelu if zoff_nn is not None else F.gelu
linear = zoff_nn.linear if zoff_nn is not None else F.linear
matmul = zoff_nn.matmul if zoff_nn is not None else torch.matmul
if zoff_nn is not None:
    baddbmm = zoff_nn.baddbmm
else:
    def baddbmm(c, a, b, *, beta=1.0, alpha=1.0):
        return torch.baddbmm(c, a, b, beta=beta, alpha=alpha)

PRESETS = {  # the C++ presets (include/zoff/models/gpt_config.h)
    "tiny": dict(n_layer=5, n_head=4, n_embd=128, block_size=128),
    "small": dict(n_layer=8, n_head=6, n_embd=384, block_size=256),
    "medium": dict(n_layer=12, n_head=14, n_embd=896, block_size=1024),
}


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm computed in fp32 when x is 16-bit, rounded back to x's dtype (what
    torch.autocast does on CPU, and zoff's C++ gpt; PyTorch 1.13's bf16 layer_norm was slower
    on CPU): for bf16 outside autocast in one kernel (zoff.nn.layer_norm) where zoff
    imports, else widen, normalize, round. fp32 x: nn.LayerNorm itself."""

    def forward(self, x):
        if x.dtype == torch.float32:
            return super().forward(x)
        if zoff_nn is not None and x.dtype == torch.bfloat16 and not torch.is_autocast_enabled("cpu"):
            return zoff_nn.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return F.layer_norm(x.float(), self.normalized_shape, self.weight.float(),
                            self.bias.float(), self.eps).to(x.dtype)


class Linear(nn.Linear):
    """nn.Linear through `linear` above (zoff's widened 16-bit product where it applies)."""

    def forward(self, x):
        return linear(x, self.weight, self.bias)


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.qkv = Linear(n_embd, 3 * n_embd)
        self.proj = Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        if zoff_nn is not None:
            # The C++ gpt's attention: bf16 scores through zoff's causal softmax, or long bf16
            # windows through PyTorch's fused (flash) attention (zoff.nn.causal_attention).
            y = zoff_nn.causal_attention(q, k, v)
        else:
            # Scores plus the causal mask (-inf above the diagonal) in one baddbmm, as the C++
            # gpt: faster than matmul, scale and masked_fill, and no mask to apply in backward.
            q, k = q.reshape(B * self.n_head, T, hs), k.reshape(B * self.n_head, T, hs)
            future = torch.full((T, T), float("-inf"), dtype=q.dtype, device=x.device).triu(1)
            att = torch.softmax(baddbmm(future, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(hs)), -1)
            y = matmul(att.view(B, self.n_head, T, T), v)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = LayerNorm(n_embd)
        self.fc = Linear(n_embd, 4 * n_embd)
        self.mlp_proj = Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(gelu(self.fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size=256):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = LayerNorm(n_embd)
        self.lm_head = Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: trained once
        self._init_weights(n_layer)

    @torch.no_grad()
    def _init_weights(self, n_layer):  # GPT-2's: normal(0.02), residual projections scaled
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        for b in self.blocks:
            for lin in (b.attn.qkv, b.attn.proj, b.fc, b.mlp_proj):
                residual = lin is b.attn.proj or lin is b.mlp_proj
                nn.init.normal_(lin.weight, 0.0, 0.02 / math.sqrt(2.0 * n_layer) if residual else 0.02)
                nn.init.zeros_(lin.bias)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), dtype=idx.dtype, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # [B, T, V]


def gpt_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))


def fortunes_bytes(directory="/usr/share/games/fortunes"):
    """The corpus as zoff's C++ reader sees it: regular files sorted by name, no *.dat/*.u8."""
    parts = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.islink(path) or not os.path.isfile(path) or name.endswith((".dat", ".u8")):
            continue
        with open(path, "rb") as f:
            parts.append(f.read())
    return torch.frombuffer(bytearray(b"".join(parts)), dtype=torch.uint8).long()


def batch_windows(text, step, batch, block_size, seed=0):
    """The global batch of `step`: `batch` random windows of block_size + 1 bytes, the same
    on every rank (each takes its slice)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, text.numel() - block_size - 1, (batch,), generator=g)
    return torch.stack([text[s:s + block_size + 1] for s in starts.tolist()])
