"""zoff.nn's widened 16-bit products (linear, matmul, bmm, baddbmm, Linear) against PyTorch:
the fp32 product rounded once in forward, autograd through fp32 casts in backward, PyTorch's
own op where nothing is widened, autocast's casts under torch.autocast, and a bad
ZOFF_BF16_PRODUCTS refused in one line."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from zoff import nn as znn

# Backward sums the rows of the output gradient in another order than autograd through the
# casts may (same fp32 GEMMs, a different blocking), then rounds once: within one 16-bit ulp.
BF16_ULP = 1.0 / 128
FP16_ULP = 1.0 / 1024
ABS_FLOOR = 1e-6


def assert_within(got, want, ulp):
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    diff = (got.double() - want.double()).abs()
    bound = want.double().abs() * ulp + ABS_FLOOR
    assert bool((diff <= bound).all()), f"largest difference {diff.max().item()}"


def grads(fn, *operands):
    """fn's output and the gradients of (output * fixed weights).sum() for every operand."""
    leaves = [t.detach().clone().requires_grad_() for t in operands]
    y = fn(*leaves)
    dy = torch.linspace(-1, 1, y.numel()).view(y.shape).to(y.dtype)
    y.backward(dy)
    return y.detach(), [t.grad for t in leaves]


def widen(op, dtype):
    """The reference: autograd through fp32 casts, the product rounded once to dtype."""
    return lambda *ts: op(*(t.float() for t in ts)).to(dtype)


CASES = {  # name: (zoff op, the fp32 op it widens, operand shapes)
    "linear": (znn.linear, F.linear, [(3, 17, 40), (24, 40), (24,)]),
    "linear_no_bias": (znn.linear, F.linear, [(3, 17, 40), (24, 40)]),
    "matmul_3d_2d": (znn.matmul, torch.matmul, [(3, 17, 40), (40, 24)]),
    "matmul_4d": (znn.matmul, torch.matmul, [(2, 3, 17, 40), (2, 3, 40, 24)]),
    "bmm": (znn.bmm, torch.bmm, [(6, 17, 40), (6, 40, 24)]),
    "baddbmm": (lambda c, a, b: znn.baddbmm(c, a, b, beta=0.5, alpha=0.25),
                lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=0.25),
                [(17, 24), (6, 17, 40), (6, 40, 24)]),
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_widened_product_is_the_fp32_product_rounded_once(name, dtype, widened_bf16):
    op, fp32_op, shapes = CASES[name]
    torch.manual_seed(len(name))
    operands = [torch.randn(s).to(dtype) for s in shapes]
    y, got = grads(op, *operands)
    ry, want = grads(widen(fp32_op, dtype), *operands)
    assert torch.equal(y, ry)  # forward: bit for bit the fp32 product rounded once
    ulp = FP16_ULP if dtype == torch.float16 else BF16_ULP
    for g, r in zip(got, want):
        assert_within(g, r, ulp)


def test_native_bf16_products_are_pytorchs_own(native_bf16):
    torch.manual_seed(5)
    x, w = torch.randn(3, 8, 16).bfloat16(), torch.randn(4, 16).bfloat16()
    assert torch.equal(znn.linear(x, w), F.linear(x, w))
    assert torch.equal(znn.matmul(x, w.t()), torch.matmul(x, w.t()))


def test_fp32_products_are_pytorchs_own():
    torch.manual_seed(3)
    x, w, b = torch.randn(5, 7, 12), torch.randn(9, 12), torch.randn(9)
    assert torch.equal(znn.linear(x, w, b), F.linear(x, w, b))
    assert torch.equal(znn.matmul(x, w.t()), torch.matmul(x, w.t()))
    assert torch.equal(znn.bmm(x, x.transpose(1, 2)), torch.bmm(x, x.transpose(1, 2)))
    layer = znn.Linear(12, 9)
    assert isinstance(layer, torch.nn.Linear)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_under_autocast_operands_take_autocasts_dtype_first():
    torch.manual_seed(4)
    x, w, b = torch.randn(4, 10, 32), torch.randn(16, 32), torch.randn(16)
    with torch.autocast("cpu", dtype=torch.float16):
        y = znn.linear(x, w, b)
    # fp16 is always widened: the fp32 product of the fp16-rounded operands, rounded once.
    want = F.linear(x.half().float(), w.half().float(), b.half().float()).half()
    assert y.dtype == torch.float16 and torch.equal(y, want)


def test_a_bad_choice_is_refused_naming_it():
    code = ("import torch; from zoff import nn as znn; "
            "znn.linear(torch.ones(2, 2, dtype=torch.bfloat16), torch.ones(2, 2, dtype=torch.bfloat16))")
    env = dict(os.environ, ZOFF_BF16_PRODUCTS="fastest")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "ZOFF_BF16_PRODUCTS=fastest: expected auto, native or widened" in p.stderr


def test_set_bf16_products_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="mode = 'fast': expected 'auto', 'native' or 'widened'"):
        znn.set_bf16_products("fast")


@pytest.fixture
def widened_bf16():
    znn.set_bf16_products("widened")
    yield
    znn.set_bf16_products("auto")


@pytest.fixture
def native_bf16():
    znn.set_bf16_products("native")
    yield
    znn.set_bf16_products("auto")
