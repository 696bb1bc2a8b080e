"""zoff.nn: the fused bf16 LayerNorm, GELU, causal softmax and attention against PyTorch's
own ops, and their fallbacks."""
import pytest
import torch
import torch.nn.functional as F

import zoff
from zoff import nn as znn

BF16_ULP = 1.0 / 128  # one bf16 ulp, relative (the kernels round fp32 results once)
ABS_FLOOR = 2e-6      # where both results are within ~1e-5 of 0 (see tests/models/*_test.cpp)


def assert_within_ulp(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    diff = (got.double() - want.double()).abs()
    bound = want.double().abs() * BF16_ULP + ABS_FLOOR
    assert bool((diff <= bound).all()), f"largest difference {diff.max().item()}"


def forward_backward(fn, x, dy, *params):
    x = x.detach().clone().requires_grad_()
    params = [p.detach().clone().requires_grad_() for p in params]
    y = fn(x, *params)
    y.backward(dy)
    return y.detach(), x.grad, [p.grad for p in params]


def test_layer_norm_matches_widen_normalize_round():
    torch.manual_seed(0)
    x = (torch.randn(4, 64, 96) * 3 + 0.5).bfloat16()
    w, b = (torch.randn(96) * 0.2 + 1).bfloat16(), (torch.randn(96) * 0.1).bfloat16()
    dy = torch.randn(4, 64, 96).bfloat16()

    def widened(v, wv, bv):
        return F.layer_norm(v.float(), (96,), wv.float(), bv.float(), 1e-5).bfloat16()

    y, dx, (dw, db) = forward_backward(lambda v, wv, bv: znn.layer_norm(v, (96,), wv, bv, 1e-5), x, dy, w, b)
    ry, rdx, (rdw, rdb) = forward_backward(widened, x, dy, w, b)
    assert_within_ulp(y, ry)
    assert_within_ulp(dx, rdx)
    assert_within_ulp(dw, rdw)
    assert_within_ulp(db, rdb)


def test_gelu_matches_pytorch():
    torch.manual_seed(1)
    x = (torch.randn(64, 1000) * 3 + 0.5).bfloat16()
    dy = torch.randn(64, 1000).bfloat16()
    y, dx, _ = forward_backward(znn.gelu, x, dy)
    ry, rdx, _ = forward_backward(F.gelu, x, dy)
    assert torch.equal(y, ry)  # the forward is PyTorch's own
    assert_within_ulp(dx, rdx)


def masked_softmax(scores, scale):  # the PyTorch GPT's way: scale, -inf above the diagonal
    T = scores.size(-1)
    future = torch.full((T, T), float("-inf"), dtype=scores.dtype).triu(1)
    return torch.softmax(scores * scale + future, -1)


def test_causal_softmax_matches_masked_softmax():
    torch.manual_seed(3)
    scores = (torch.randn(2, 3, 40, 40) * 8).bfloat16()  # 40: rows with a partial vector
    dy = torch.randn(2, 3, 40, 40).bfloat16()
    y, dx, _ = forward_backward(lambda s: znn.causal_softmax(s, 0.125), scores, dy)
    ry, rdx, _ = forward_backward(lambda s: masked_softmax(s, 0.125), scores, dy)
    assert_within_ulp(y, ry)
    assert bool((y.triu(1) == 0).all()) and bool((dx.triu(1) == 0).all())
    # dx goes through dy - sum(y dy), which cancels: a one-ulp difference in y moves it by up
    # to scale * 2^-8 * 3 max|dy| of the row (tests/models/fused_causal_softmax_test.cpp).
    floor = dy.double().abs().amax(-1, keepdim=True) * (0.125 * 3 / 256)
    diff = (dx.double() - rdx.double()).abs()
    assert bool((diff <= rdx.double().abs() * BF16_ULP + floor).all()), diff.max().item()
    # fp32: PyTorch's own ops, the same values as the masked softmax
    s32 = scores.float()
    assert torch.allclose(znn.causal_softmax(s32, 0.125), masked_softmax(s32, 0.125))


# Relative error (norm) of bf16 attention against fp64: tests/models/causal_attention_test.cpp.
ATTENTION_BF16_RTOL = 1e-2


def test_causal_attention_matches_fp64_sdpa_with_either_kernel():
    torch.manual_seed(4)
    x = torch.randn(2, 80, 3, 3, 16)  # [B, T, q/k/v, heads, head size], as a GPT splits it
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    dy = torch.randn(2, 3, 80, 16)
    want = forward_backward(lambda a: F.scaled_dot_product_attention(a, k.double(), v.double(), is_causal=True),
                            q.double(), dy.double())
    for kernel in ("materialized", "flash"):
        y, dq, _ = forward_backward(lambda a: znn.causal_attention(a, k.bfloat16(), v.bfloat16(), kernel),
                                    q.bfloat16(), dy.bfloat16())
        assert y.dtype == torch.bfloat16
        for got, ref in ((y, want[0]), (dq, want[1])):
            err = ((got.double() - ref).norm() / ref.norm()).item()
            assert err < ATTENTION_BF16_RTOL, (kernel, err)
    # auto: materialized below 2048 tokens; under autocast fp32 operands are cast as autocast would
    assert torch.equal(znn.causal_attention(q.bfloat16(), k.bfloat16(), v.bfloat16()),
                       znn.causal_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), "materialized"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert znn.causal_attention(q, k, v).dtype == torch.bfloat16
    long_ = not znn.bf16_products_widened()
    assert zoff._zoff.flash_attention_applies("auto", 2048, torch.bfloat16, True) == long_
    assert not zoff._zoff.flash_attention_applies("auto", 2047, torch.bfloat16, True)


def test_modules_are_drop_ins_and_fall_back_outside_bf16():
    torch.manual_seed(2)
    ln, ref = znn.LayerNorm(32), torch.nn.LayerNorm(32)
    ln.load_state_dict(ref.state_dict())  # the same parameters and names
    x = torch.randn(5, 32)
    assert torch.equal(ln(x), ref(x))  # fp32: F.layer_norm itself
    assert torch.equal(znn.GELU()(x), F.gelu(x))
    assert torch.equal(znn.gelu(x.bfloat16(), approximate="tanh"), F.gelu(x.bfloat16(), approximate="tanh"))
    xb, wb, bb = x.bfloat16(), ln.weight.bfloat16(), ln.bias.bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast decides: F.layer_norm itself
        assert torch.equal(znn.layer_norm(xb, (32,), wb, bb), F.layer_norm(xb, (32,), wb, bb))
    assert "nn" in zoff.__all__


def test_bad_input_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="x is Float"):
        zoff._zoff.fused_gelu(torch.zeros(4))
    x = torch.zeros(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"weight has shape \[7\]"):
        zoff._zoff.fused_layer_norm(x, torch.ones(7), torch.zeros(8), 1e-5)
    with pytest.raises(ValueError, match=r"shape \[4, 5\]"):
        znn.causal_softmax(torch.zeros(4, 5, dtype=torch.bfloat16), 0.5)
    with pytest.raises(ValueError, match="scale = 0"):
        znn.causal_softmax(torch.zeros(4, 4), 0.0)
    with pytest.raises(ValueError, match="scores is Float"):
        zoff._zoff.fused_causal_softmax(torch.zeros(4, 4), 0.5)
    q = torch.zeros(1, 2, 8, 4)
    with pytest.raises(ValueError, match="kernel = 'fast'"):
        znn.causal_attention(q, q, q, "fast")
    with pytest.raises(ValueError, match=r"k \[1, 2, 9, 4\]"):
        znn.causal_attention(q, torch.zeros(1, 2, 9, 4), q)
    with pytest.raises(ValueError, match="attention kernel 'fast'"):
        zoff._zoff.causal_attention(q, q, q, "fast")
    with pytest.raises(ValueError, match="must have one dtype"):
        zoff._zoff.causal_attention(q, q.bfloat16(), q, "flash")


class _UserBlock(torch.nn.Module):
    """A user's module: torch.nn layers, a subclass of Linear that must stay as it is."""

    class MyLinear(torch.nn.Linear):
        pass

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.act = torch.nn.GELU()
        self.out = self.MyLinear(32, 4)

    def forward(self, x):
        return self.out(self.act(self.ln(self.fc(x))))


def test_use_fused_kernels_swaps_exactly_the_torch_classes_in_place():
    torch.manual_seed(3)
    block = _UserBlock()
    x = torch.randn(6, 16)
    before, keys = block(x), list(block.state_dict())
    assert znn.use_fused_kernels(block) == 3
    assert type(block.fc) is znn.Linear and type(block.ln) is znn.LayerNorm
    assert type(block.act) is znn.GELU and type(block.out) is _UserBlock.MyLinear
    assert list(block.state_dict()) == keys
    assert torch.equal(block(x), before)  # fp32: PyTorch's own ops, bit for bit
    # bf16: the widened product (fp32 GEMM rounded once) of the same operands.
    xb, fc = x.bfloat16(), block.fc.bfloat16()
    want = F.linear(xb.float(), fc.weight.float(), fc.bias.float()).bfloat16()
    if znn.bf16_products_widened():
        assert torch.equal(fc(xb), want)
    with pytest.raises(ValueError, match="expected a torch.nn.Module, got list"):
        znn.use_fused_kernels([block])
