// fused_layer_norm: the autograd function over layer_norm_kernels' bf16 rows.
#include "zoff/models/fused_layer_norm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bf16_bits.h"
#include "layer_norm_kernels.h"
#include "zoff/core/error.h"

namespace zoff::models {
namespace {

// Rows per task of the backward's weight-gradient partial sums: fixed, so the summation
// order (and the result) does not depend on the number of threads.
constexpr int64_t kRowsPerChunk = 256;

using detail::bf16_bits;

void check_inputs(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                  double eps) {
  ZOFF_CHECK_ARG(x.scalar_type() == torch::kBFloat16, "fused_layer_norm: x is ", x.scalar_type(),
                 ": expected BFloat16");
  ZOFF_CHECK_ARG(x.device().is_cpu(), "fused_layer_norm: x is on ", x.device(),
                 ": only CPU tensors are supported");
  ZOFF_CHECK_ARG(x.dim() >= 1 && x.size(-1) >= 1, "fused_layer_norm: x has shape ", x.sizes(),
                 ": needs a non-empty last dimension");
  for (const auto* t : {&weight, &bias}) {
    ZOFF_CHECK_ARG(t->dim() == 1 && t->size(0) == x.size(-1),
                   "fused_layer_norm: ", t == &weight ? "weight" : "bias", " has shape ",
                   t->sizes(), ": expected [", x.size(-1), "]");
    ZOFF_CHECK_ARG(t->scalar_type() == torch::kBFloat16 || t->scalar_type() == torch::kFloat32,
                   "fused_layer_norm: ", t == &weight ? "weight" : "bias", " is ", t->scalar_type(),
                   ": expected BFloat16 or Float");
  }
  ZOFF_CHECK_ARG(eps > 0.0, "fused_layer_norm: eps = ", eps, ": must be > 0");
}

class FusedLayerNorm : public torch::autograd::Function<FusedLayerNorm> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps) {
    const auto xc = x.contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    const auto w = weight.to(torch::kFloat32).contiguous();
    const auto b = bias.to(torch::kFloat32).contiguous();
    auto y = torch::empty_like(xc);
    auto mean = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    auto rstd = torch::empty({rows}, x.options().dtype(torch::kFloat32));
    at::parallel_for(0, rows, kRowsPerChunk, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(static_cast<size_t>(cols));
      detail::layer_norm_bf16_forward(bf16_bits(xc) + begin * cols, w.data_ptr<float>(),
                                      b.data_ptr<float>(), static_cast<size_t>(end - begin),
                                      static_cast<size_t>(cols), static_cast<float>(eps),
                                      bf16_bits(y) + begin * cols, mean.data_ptr<float>() + begin,
                                      rstd.data_ptr<float>() + begin, scratch.data());
    });
    ctx->save_for_backward({xc, w, mean, rstd});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(bias.scalar_type());
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    const auto dy = grads[0].to(torch::kBFloat16).contiguous();
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
    auto dx = torch::empty_like(x);
    // Per chunk of rows: its partial sums of dy * xhat and dy, added in chunk order below.
    auto partial = torch::zeros({chunks, 2, cols}, x.options().dtype(torch::kFloat32));
    at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(2 * static_cast<size_t>(cols));
      for (int64_t k = first; k < last; ++k) {
        const int64_t begin = k * kRowsPerChunk, n = std::min(kRowsPerChunk, rows - begin);
        float* sums = partial.data_ptr<float>() + k * 2 * cols;
        detail::layer_norm_bf16_backward(
            bf16_bits(dy) + begin * cols, bf16_bits(x) + begin * cols,
            mean.data_ptr<float>() + begin, rstd.data_ptr<float>() + begin, w.data_ptr<float>(),
            static_cast<size_t>(n), static_cast<size_t>(cols), bf16_bits(dx) + begin * cols, sums,
            sums + cols, scratch.data());
      }
    });
    auto sums = partial[0].clone();
    for (int64_t k = 1; k < chunks; ++k) sums.add_(partial[k]);
    const auto weight_dtype =
        static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const auto bias_dtype = static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    return {dx, sums[0].to(weight_dtype), sums[1].to(bias_dtype), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps) {
  check_inputs(x, weight, bias, eps);
  return FusedLayerNorm::apply(x, weight, bias, eps);
}

}  // namespace zoff::models
