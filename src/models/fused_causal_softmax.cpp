// fused_causal_softmax: softmax_kernels' row kernels over LibTorch's intra-op threads.
#include "zoff/models/fused_causal_softmax.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "bf16_bits.h"
#include "softmax_kernels.h"
#include "zoff/core/error.h"

namespace zoff::models {
namespace {

// Rows per task: at least ~64K elements of work (gpt small's T = 256: 256 rows, ~50 us),
// long enough to hide a pool thread's wake-up.
constexpr int64_t kGrainElements = 64 * 1024;

using detail::bf16_bits;

int64_t grain_rows(int64_t T) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(T, 1));
}

// Rows of T keys in t (none when T = 0).
int64_t rows(const torch::Tensor& t, int64_t T) { return T == 0 ? 0 : t.numel() / T; }

class FusedCausalSoftmax : public torch::autograd::Function<FusedCausalSoftmax> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& scores,
                               double scale) {
    const auto s = scores.contiguous();
    const int64_t T = s.size(-1);
    auto y = torch::empty_like(s);
    at::parallel_for(0, rows(s, T), grain_rows(T), [&](int64_t begin, int64_t end) {
      detail::causal_softmax_bf16_forward(bf16_bits(s), bf16_bits(y), static_cast<size_t>(T),
                                          static_cast<size_t>(begin), static_cast<size_t>(end),
                                          static_cast<float>(scale));
    });
    ctx->save_for_backward({y});
    ctx->saved_data["scale"] = scale;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto y = ctx->get_saved_variables()[0];
    const auto dy = grads[0].to(torch::kBFloat16).contiguous();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const int64_t T = y.size(-1);
    auto dx = torch::empty_like(y);
    at::parallel_for(0, rows(y, T), grain_rows(T), [&](int64_t begin, int64_t end) {
      detail::causal_softmax_bf16_backward(bf16_bits(y), bf16_bits(dy), bf16_bits(dx),
                                           static_cast<size_t>(T), static_cast<size_t>(begin),
                                           static_cast<size_t>(end), scale);
    });
    return {dx, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_causal_softmax(const torch::Tensor& scores, double scale) {
  ZOFF_CHECK_ARG(scores.scalar_type() == torch::kBFloat16, "fused_causal_softmax: scores is ",
                 scores.scalar_type(), ": expected BFloat16");
  ZOFF_CHECK_ARG(scores.device().is_cpu(), "fused_causal_softmax: scores is on ", scores.device(),
                 ": only CPU tensors are supported");
  ZOFF_CHECK_ARG(scores.dim() >= 2 && scores.size(-1) == scores.size(-2),
                 "fused_causal_softmax: scores has shape ", scores.sizes(),
                 ": expected [..., T, T]");
  ZOFF_CHECK_ARG(std::isfinite(scale) && scale > 0.0, "fused_causal_softmax: scale = ", scale,
                 ": must be finite and > 0");
  return FusedCausalSoftmax::apply(scores, scale);
}

}  // namespace zoff::models
