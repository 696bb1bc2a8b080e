"""A GPT written the way a PyTorch user writes one: nn.MultiheadAttention, nn.LayerNorm,
nn.Sequential MLPs, a head tied to the token embedding, and a position buffer."""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        # No projection biases: the key bias has an exactly zero gradient (softmax ignores a
        # constant added to every score of a row), so Adam would move it by the sign of
        # rounding noise, differently in any two correct implementations.
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True, bias=False)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        t = x.size(1)
        future = torch.full((t, t), float("-inf"), dtype=x.dtype).triu(1)  # causal mask [T, T]
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=future, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class MhaGPT(nn.Module):
    def __init__(self, vocab_size=256, n_embd=32, n_head=2, n_layer=2, block_size=16):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied
        self.register_buffer("positions", torch.arange(block_size), persistent=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(self.positions[: idx.size(1)])
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))  # [B, T, vocab]
