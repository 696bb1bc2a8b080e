// fp16 matrix products with fp32 operands and accumulation, rounded once to fp16.
#include "zoff/models/widened_products.h"

namespace zoff::models {
namespace {

bool is_fp16(const torch::Tensor& t) { return t.defined() && t.scalar_type() == torch::kHalf; }

torch::Tensor wide(const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat32) : t; }

}  // namespace

torch::Tensor widened_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (!is_fp16(x)) return torch::linear(x, w, b);
  return torch::linear(wide(x), wide(w), wide(b)).to(torch::kHalf);
}

torch::Tensor widened_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!is_fp16(a)) return torch::matmul(a, b);
  return torch::matmul(wide(a), wide(b)).to(torch::kHalf);
}

torch::Tensor widened_baddbmm(const torch::Tensor& c, const torch::Tensor& a, const torch::Tensor& b,
                              double beta, double alpha) {
  if (!is_fp16(a)) return torch::baddbmm(c, a, b, beta, alpha);
  return torch::baddbmm(wide(c), wide(a), wide(b), beta, alpha).to(torch::kHalf);
}

}  // namespace zoff::models
