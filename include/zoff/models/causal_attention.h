// Multi-head causal attention softmax(q k^T / sqrt(hs), causal) v by the kernel a GPT
// config names: materialized weights or PyTorch's fused (flash) attention.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "zoff/models/attention_kernel.h"

namespace zoff::models {

// Whether `kernel` streams (kFlash) rather than materializes a window of T tokens whose
// activations are `dtype` on a CPU (`cpu`) or elsewhere. kAuto streams bf16 CPU activations
// of T >= kFlashMinContext when bf16 products are native (not widened: PyTorch's fused
// kernel multiplies in bf16, which is ~30x slower than fp32 on CPUs without bf16 dot
// products) and no attention dropout is applied (`dropout_active`: dropout > 0 in training).
// Other devices and dtypes keep the materialized ops, which the tests pin bit for bit.
bool flash_attention_applies(AttentionKernel kernel, int64_t T, torch::ScalarType dtype, bool cpu,
                             bool dropout_active);

struct CausalAttentionOptions {
  AttentionKernel kernel = AttentionKernel::kAuto;
  // bf16 CPU scores through zoff's fused causal softmax (fused_causal_softmax.h); else
  // baddbmm with a -inf mask and LibTorch's softmax. Materialized path only.
  bool fused_softmax = true;
  double dropout = 0.0;  // on the attention weights while `training`
  bool training = false;
};

// q, k, v [B, nh, T, hs] (any strides, one dtype) -> [B, nh, T, hs]: position t attends to
// 0..t. Differentiable in q, k and v. Shapes that disagree are a UsageError naming them.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const CausalAttentionOptions& options);

}  // namespace zoff::models
