// Matrix products of fp16 activations computed in fp32, as GPU tensor cores compute them.
#pragma once

#include <torch/torch.h>

namespace zoff::models {

// On this CPU (AVX512-BF16, no AVX512-FP16) LibTorch's fp16 GEMM runs at ~3 GFLOP/s against
// ~400 for bf16 and ~200 for fp32. For fp16 operands these widen both to fp32, multiply
// with fp32 accumulation (LibTorch's fp32 GEMM) and round the product once to fp16: the
// arithmetic of an fp16 GEMM with fp32 accumulation on tensor cores, whose result differs
// from a pure-fp16 product only where the fp16 kernel itself rounds partial sums. Autograd
// goes through the casts, so backward's products are widened the same way and the
// gradients come back in fp16. Other dtypes go straight to LibTorch's op.

// x @ w^T + b (ATen's linear; b may be undefined).
torch::Tensor widened_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b);

// a @ b (ATen's matmul, any batch shape).
torch::Tensor widened_matmul(const torch::Tensor& a, const torch::Tensor& b);

// beta c + alpha (a @ b) over a batch of matrices (ATen's baddbmm).
torch::Tensor widened_baddbmm(const torch::Tensor& c, const torch::Tensor& a, const torch::Tensor& b,
                              double beta, double alpha);

}  // namespace zoff::models
