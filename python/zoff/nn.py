"""zoff's fused bf16 CPU kernels and widened 16-bit matrix products as drop-ins for
torch.nn.functional, torch and torch.nn modules.

Kernels: PyTorch's CPU LayerNorm, GELU and masked softmax on bf16 input take several passes
(GELU's backward an erf and an exp per element; the masked softmax exponentiates the masked
half of attention's scores too). zoff's compute in fp32 inside and round once, in one pass
each way (the C++ gpt uses the same ones); on PyTorch 2.15 (AVX2 EPYC, gpt small's shapes,
one thread, 2026-11-28) they take 0.58-0.95x the time of PyTorch's own ops (docs/figures.md).
Each function takes the kernel only where it applies (bf16 CPU tensors, LayerNorm over the last
dimension with weight and bias, the exact GELU, autocast off for LayerNorm, square scores) and
is torch.nn.functional's own otherwise, so a model using them runs anywhere.

Products: on CPUs without bf16 dot products (no AVX512-BF16 or AMX-BF16) ATen's bf16 and fp16
GEMMs are a generic kernel, ~30x slower than its fp32 GEMM. `linear`, `matmul`, `bmm` and
`baddbmm` compute a 16-bit product there as the fp32 product rounded once to the 16-bit type
(the arithmetic of a 16-bit GEMM with fp32 accumulation, up to the order of the additions),
in forward and backward, saving only the 16-bit operands. fp16 is always widened; bf16 per
ZOFF_BF16_PRODUCTS (auto: by the CPU; native; widened), as in the C++ models, or
set_bf16_products("auto" | "native" | "widened") for the whole process. Under
torch.autocast("cpu") they cast their operands to autocast's dtype first, as autocast would,
then widen. fp32 products, and 16-bit ones that are not widened, are PyTorch's own ops, except
`linear`'s native bf16 product under autograd, whose weight gradient is zoff's faster one.

    from zoff import nn as znn
    self.ln = znn.LayerNorm(n_embd)          # or znn.layer_norm(x, shape, w, b, eps)
    self.fc = znn.Linear(n_embd, 4 * n_embd)  # or znn.linear(x, w, b)
    h = znn.gelu(self.fc(x))
    att = znn.causal_softmax(znn.bmm(q, k.transpose(-2, -1)), 1 / math.sqrt(head_size))
    y = znn.causal_attention(q, k, v)  # [B, heads, T, head size]: the C++ gpt's attention
"""
import math

import torch
import torch.nn.functional as F

from . import _zoff

__all__ = ["layer_norm", "gelu", "causal_softmax", "causal_attention", "linear", "matmul", "bmm", "baddbmm",
           "set_bf16_products", "bf16_products_widened", "LayerNorm", "GELU", "Linear",
           "use_fused_kernels"]

set_bf16_products = _zoff.set_bf16_products
bf16_products_widened = _zoff.bf16_products_widened


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


ATTENTION_KERNELS = ("auto", "materialized", "flash")


def causal_attention(q, k, v, kernel="auto"):
    """softmax(q k^T / sqrt(head size), causal) v for q, k, v [B, heads, T, head size] (one
    shape and dtype; any strides): the C++ gpt's attention, op for op. kernel "materialized":
    the weights [B heads, T, T] are computed (through causal_softmax for bf16) and kept for
    backward; "flash": PyTorch's fused scaled_dot_product_attention(is_causal=True), which
    keeps only the output and a log-sum-exp per row and recomputes the weights in backward;
    "auto": flash for bf16 CPU tensors of T >= 2048 where the CPU multiplies bf16 natively
    (bf16_products_widened() is False), materialized otherwise (docs/figures.md has the
    measurements behind the threshold). Under torch.autocast("cpu") the operands are cast
    to autocast's dtype first, as autocast would."""
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"causal_attention: kernel = {kernel!r}: expected one of {ATTENTION_KERNELS}")
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"causal_attention: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)}: "
                         "expected one shape [B, heads, T, head size]")
    if q.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        cast = torch.get_autocast_dtype("cpu")
        with torch.autocast("cpu", enabled=False):
            return _zoff.causal_attention(q.to(cast), k.to(cast), v.to(cast), kernel)
    return _zoff.causal_attention(q, k, v, kernel)


def _widened_dtype(dtype):
    return dtype == torch.float16 or (dtype == torch.bfloat16 and bf16_products_widened())


def _16bit_dtype(dtype):
    return dtype in (torch.bfloat16, torch.float16)


def _product(widened_op, torch_op, lead, operands, *args, takes=_widened_dtype):
    """torch_op(*operands, *args), or zoff's widened_op where `takes` the product's dtype
    (default: where the product is widened). `lead` is the operand whose dtype (or, under
    autocast, autocast's dtype) decides."""
    if lead.device.type != "cpu":
        return torch_op(*operands, *args)
    if torch.is_autocast_enabled("cpu"):
        cast = torch.get_autocast_dtype("cpu")
        if not takes(cast):
            return torch_op(*operands, *args)
        # autocast's own casts, then the product without autocast (which would cast the
        # widened fp32 operands back down).
        operands = [t.to(cast) if t is not None and t.is_floating_point() else t for t in operands]
        with torch.autocast("cpu", enabled=False):
            return widened_op(*operands, *args)
    if takes(lead.dtype):
        return widened_op(*operands, *args)
    return torch_op(*operands, *args)


def linear(x, weight, bias=None):
    """F.linear: x @ weight^T + bias. 16-bit CPU products (x's dtype, or autocast's) go to the
    C++ gpt's linear: widened where products are widened; native bf16 under autograd takes
    ATen's forward and a weight gradient ~2x faster than PyTorch's (dy^T x from a row-major
    copy of dy^T: models/native_bf16_linear.h), the same arithmetic in another order."""
    return _product(_zoff.widened_linear, F.linear, x, [x, weight, bias], takes=_16bit_dtype)


def matmul(a, b):
    """torch.matmul of two operands with two or more dimensions each; widened where it applies."""
    if a.dim() < 2 or b.dim() < 2:
        return torch.matmul(a, b)
    return _product(_zoff.widened_matmul, torch.matmul, a, [a, b])


def bmm(a, b):
    """torch.bmm (3-D operands); widened where it applies."""
    return _product(_zoff.widened_bmm, torch.bmm, a, [a, b])


def baddbmm(c, a, b, *, beta=1.0, alpha=1.0):
    """torch.baddbmm: beta c + alpha (a @ b); widened where it applies (a's dtype decides)."""
    return _product(_zoff.widened_baddbmm, lambda c_, a_, b_, be, al: torch.baddbmm(
        c_, a_, b_, beta=be, alpha=al), a, [c, a, b], float(beta), float(alpha))


class Linear(torch.nn.Linear):
    """torch.nn.Linear whose forward is zoff.nn.linear."""

    def forward(self, x):
        return linear(x, self.weight, self.bias)


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm whose forward is zoff.nn.layer_norm."""

    def forward(self, x):
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class GELU(torch.nn.GELU):
    """torch.nn.GELU whose forward is zoff.nn.gelu."""

    def forward(self, x):
        return gelu(x, approximate=self.approximate)


# torch.nn classes whose instances use_fused_kernels turns into zoff's (same attributes,
# state and parameters; only forward differs).
_SWAPS = {torch.nn.Linear: Linear, torch.nn.LayerNorm: LayerNorm, torch.nn.GELU: GELU}


def use_fused_kernels(model):
    """Makes every torch.nn.Linear, LayerNorm and GELU of `model` (exactly those classes, not
    subclasses) use zoff's products and kernels in place: its class becomes zoff.nn's
    subclass, whose forward calls the functions above; parameters, buffers, hooks and
    state_dict keys stay as they are. For a model written by others (a Hugging Face
    transformer) trained in bf16 on a CPU without bf16 dot products, where PyTorch's own bf16
    GEMMs are ~30x slower than fp32. fp32 modules compute as before, bit for bit. Returns
    the number of modules changed."""
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"use_fused_kernels: expected a torch.nn.Module, got {type(model).__name__}")
    changed = 0
    for m in model.modules():
        target = _SWAPS.get(type(m))
        if target is not None:
            m.__class__ = target
            changed += 1
    return changed
