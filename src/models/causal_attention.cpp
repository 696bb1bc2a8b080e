// causal_attention: the materialized path (scores, causal softmax, product with v) and
// PyTorch's fused attention, chosen per models::AttentionKernel.
#include "zoff/models/causal_attention.h"

#include <cmath>
#include <limits>

#include "zoff/core/error.h"
#include "zoff/models/fused_causal_softmax.h"
#include "zoff/models/widened_products.h"

namespace zoff::models {
namespace {

// Attention weights [B nh, T, T] of q, k [B nh, T, hs]: causal, scaled by 1 / sqrt(hs).
torch::Tensor materialized_weights(const torch::Tensor& q, const torch::Tensor& k,
                                   bool fused_softmax) {
  const int64_t T = q.size(1);
  const double scale = 1.0 / std::sqrt(double(q.size(2)));
  if (fused_softmax && q.scalar_type() == torch::kBFloat16 && q.is_cpu()) {
    // The kernel scales, masks and normalizes the prefix of each row in one pass and never
    // reads the future (gpt small's shapes: forward 2.78 vs 4.81 ms for LibTorch's masked
    // softmax, docs/figures.md).
    return fused_causal_softmax(widened_bmm(q, k.transpose(1, 2)), scale);
  }
  // Scores q k^T / sqrt(hs) plus the causal mask, in one baddbmm: the mask is an addend,
  // -inf above the diagonal (the future gets zero weight after softmax) and 0 elsewhere.
  // One op instead of matmul, scale and masked_fill, and nothing for backward to undo at
  // the masked places (gpt small's scores and softmax, batch 8, bf16, forward + backward:
  // 14-17 -> 9.4-9.8 ms per layer). Built per call: T varies between training and
  // generation.
  const torch::Tensor future =
      torch::full({T, T}, -std::numeric_limits<double>::infinity(), q.options()).triu(1);
  return torch::softmax(
      widened_baddbmm(future, q, k.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale), -1);
}

torch::Tensor materialized_attention(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const CausalAttentionOptions& o) {
  const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hs = q.size(3);
  // Contiguous operands: with one window (B = 1) the reshapes below are strided views of the
  // qkv output, which ATen's bmm copies inside each product and its backward again (gpt xl's
  // width, 4 blocks, T = 1024: 3.33 -> 3.03 s per step with the copies made once here).
  torch::Tensor att = materialized_weights(q.reshape({B * nh, T, hs}).contiguous(),
                                           k.reshape({B * nh, T, hs}).contiguous(), o.fused_softmax)
                          .view({B, nh, T, T});
  if (o.dropout > 0.0) att = torch::dropout(att, o.dropout, o.training);
  return widened_matmul(att, v.contiguous());
}

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  ZOFF_CHECK_ARG(q.dim() == 4, "causal_attention: q has shape ", q.sizes(),
                 ": expected [B, heads, T, head size]");
  ZOFF_CHECK_ARG(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "causal_attention: q ",
                 q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), ": must have one shape");
  ZOFF_CHECK_ARG(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
                 "causal_attention: q is ", q.scalar_type(), ", k ", k.scalar_type(), ", v ",
                 v.scalar_type(), ": must have one dtype");
}

}  // namespace

bool flash_attention_applies(AttentionKernel kernel, int64_t T, torch::ScalarType dtype, bool cpu,
                             bool dropout_active) {
  if (kernel != AttentionKernel::kAuto) return kernel == AttentionKernel::kFlash;
  return cpu && dtype == torch::kBFloat16 && T >= kFlashMinContext && !dropout_active &&
         !bf16_products_widened();
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const CausalAttentionOptions& o) {
  check_shapes(q, k, v);
  const bool dropout_active = o.dropout > 0.0 && o.training;
  if (!flash_attention_applies(o.kernel, q.size(2), q.scalar_type(), q.is_cpu(), dropout_active)) {
    return materialized_attention(q, k, v, o);
  }
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{},
                                          dropout_active ? o.dropout : 0.0, /*is_causal=*/true);
}

}  // namespace zoff::models
