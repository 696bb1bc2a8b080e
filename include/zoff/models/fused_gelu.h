// GELU of bf16 activations whose backward is one pass with one exponential per element.
#pragma once

#include <torch/torch.h>

namespace zoff::models {

// The exact (erf) GELU of a bf16 tensor, y = x/2 (1 + erf(x / sqrt 2)): the forward is
// LibTorch's gelu (in 1.13 for bf16: fp32 inside, rounded once); the backward computes
// dy (Phi(x) + x phi(x)) in fp32 and rounds once, with erf from the same exp(-x^2 / 2) as
// phi (Abramowitz & Stegun 7.1.26, absolute error <= 1.5e-7), where LibTorch's takes an erf
// and an exp. Its results differ from LibTorch's by at most one bf16 ulp (or 2e-6 where
// both are near 0), and miss the correctly rounded gradient no more often (see the tests).
// Differentiable once in x; elements run in parallel on LibTorch's intra-op threads, with
// results independent of their number.
torch::Tensor fused_gelu(const torch::Tensor& x);

}  // namespace zoff::models
