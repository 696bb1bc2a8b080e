// Linear layers in bf16 on CPUs that multiply bf16 natively, with a faster weight gradient.
#pragma once

#include <torch/torch.h>

namespace zoff::models {

// Whether native_bf16_linear takes x @ w^T + b: bf16 CPU x (two or more dimensions) and
// 2-D w (b undefined or bf16), some operand needing a gradient under autograd.
bool native_bf16_linear_applies(const torch::Tensor& x, const torch::Tensor& w,
                                const torch::Tensor& b);

// ATen's linear forward; backward takes the input gradient as PyTorch does (dy @ w) and the
// weight gradient dy^T x from a row-major copy of dy^T: oneDNN multiplies a transposed left
// operand at half the speed of a row-major one (AMX Xeon, one thread, gpt medium's fc
// [2048 x 3584]^T [2048 x 896]: 26.4 ms against 11.4 + 3.5 for the copy; docs/figures.md).
// Same arithmetic (bf16 operands, fp32 sums, one rounding), another summation order.
torch::Tensor native_bf16_linear(const torch::Tensor& x, const torch::Tensor& w,
                                 const torch::Tensor& b);

// t^T of a 2-D 16-bit tensor, contiguous, through zoff's transpose kernel over LibTorch's
// intra-op threads.
torch::Tensor transpose_16bit(const torch::Tensor& t);

}  // namespace zoff::models
