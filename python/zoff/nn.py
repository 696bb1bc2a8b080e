"""zoff's fused bf16 CPU kernels as drop-ins for torch.nn.functional and torch.nn modules.

PyTorch 1.13's CPU LayerNorm on bf16 input was ~3x slower than widening to fp32 and back (not
yet re-measured on 2.x), and its GELU backward takes an erf and an exp per element; a masked softmax exponentiates the
masked half of attention's scores too. zoff's kernels compute in fp32 inside
and round once, in one pass each way (the C++ gpt uses the same ones). Each function takes
the kernel only where it applies (bf16 CPU tensors, LayerNorm over the last dimension with
weight and bias, the exact GELU, autocast off for LayerNorm, square scores) and is torch.nn.functional's
own otherwise, so a model using them runs anywhere.

    from zoff import nn as znn
    self.ln = znn.LayerNorm(n_embd)          # or znn.layer_norm(x, shape, w, b, eps)
    h = znn.gelu(self.fc(x))
    att = znn.causal_softmax(q @ k.transpose(-2, -1), 1 / math.sqrt(head_size))
"""
import math

import torch
import torch.nn.functional as F

from . import _zoff

__all__ = ["layer_norm", "gelu", "causal_softmax", "LayerNorm", "GELU"]


def _fused_applies(x):
    return x.dtype == torch.bfloat16 and x.device.type == "cpu"


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """F.layer_norm; bf16 x over its last dimension with both weight and bias (bf16 or fp32):
    zoff's kernel, the fp32 result rounded once to bf16 (what widening x to fp32, layer_norm
    and rounding back give). Under torch.autocast, F.layer_norm itself, as autocast's own
    rules run it."""
    shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    if (_fused_applies(x) and len(shape) == 1 and weight is not None and bias is not None
            and not torch.is_autocast_enabled("cpu")):
        return _zoff.fused_layer_norm(x, weight, bias, float(eps))
    return F.layer_norm(x, shape, weight, bias, eps)


def gelu(x, approximate="none"):
    """F.gelu; bf16 x with the exact GELU: LibTorch's forward and zoff's one-exponential
    backward (within one bf16 ulp of LibTorch's, as often correctly rounded)."""
    if approximate == "none" and _fused_applies(x):
        return _zoff.fused_gelu(x)
    return F.gelu(x, approximate=approximate)


def causal_softmax(scores, scale):
    """Attention weights softmax(scale * scores) over the last dimension with the causal mask
    (key j > query i gets weight 0), scores [..., T, T]. bf16 CPU scores: zoff's kernel, which
    reads and exponentiates only each row's prefix, in fp32, rounded once (within one bf16 ulp
    of the masked PyTorch softmax). Otherwise PyTorch's ops: scale, mask with -inf, softmax."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"causal_softmax: scale = {scale}: must be finite and > 0")
    if scores.dim() < 2 or scores.size(-1) != scores.size(-2):
        raise ValueError(f"causal_softmax: scores has shape {list(scores.shape)}: expected [..., T, T]")
    if _fused_applies(scores):
        return _zoff.fused_causal_softmax(scores, float(scale))
    T = scores.size(-1)
    future = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)
    return torch.softmax((scores * scale).masked_fill(future, float("-inf")), -1)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm whose forward is zoff.nn.layer_norm."""

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class GELU(torch.nn.GELU):
    """torch.nn.GELU whose forward is zoff.nn.gelu."""

    def forward(self, x):
        return gelu(x, approximate=self.approximate)
