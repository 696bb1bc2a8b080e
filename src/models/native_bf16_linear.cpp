// native_bf16_linear: ATen's bf16 linear with a row-major weight-gradient product.
#include "zoff/models/native_bf16_linear.h"

#include <ATen/Parallel.h>

#include <cstdint>

#include "transpose_kernels.h"
#include "zoff/core/error.h"

namespace zoff::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows of the source per task: one strip of the kernel (kStripRows), ~1 MB of a wide matrix.
constexpr int64_t kTransposeGrainRows = 256;

const uint16_t* bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr());
}

// src^T (src contiguous, 2-D) written into `out` ([cols, rows], contiguous).
void transpose_into(const torch::Tensor& src, torch::Tensor& out) {
  const int64_t rows = src.size(0), cols = src.size(1);
  auto* dst = reinterpret_cast<uint16_t*>(out.data_ptr());
  at::parallel_for(0, rows, kTransposeGrainRows, [&](int64_t r0, int64_t r1) {
    detail::transpose_u16(bits(src), static_cast<size_t>(rows), static_cast<size_t>(cols),
                          static_cast<size_t>(r0), static_cast<size_t>(r1), dst);
  });
}

// dy^T in a buffer this thread keeps for the next backward: a fresh one of gpt medium's
// [3584, 2048] is mapped and faulted in on every call (~1.5 ms of its 3.7; the largest
// stays resident: 42 MB at 13b's width and a 1024-token window). The product reads it
// before the thread's next call.
torch::Tensor transposed_in_scratch(const torch::Tensor& dy) {
  thread_local torch::Tensor scratch;
  const int64_t n = dy.numel();
  if (!scratch.defined() || scratch.numel() < n) scratch = torch::empty({n}, dy.options());
  auto out = scratch.narrow(0, 0, n).view({dy.size(1), dy.size(0)});
  transpose_into(dy, out);
  return out;
}

// The gradients of x @ w^T + b from dy; `bias` says whether b exists.
variable_list linear_backward(AutogradContext* ctx, const torch::Tensor& grad, bool bias) {
  const auto saved = ctx->get_saved_variables();
  const torch::Tensor& x = saved[0];
  const torch::Tensor& w = saved[1];
  const int64_t out = w.size(0), in = w.size(1);
  const auto dy = grad.to(torch::kBFloat16).reshape({-1, out}).contiguous();  // [rows, out]
  torch::Tensor dx, dw, db;
  if (ctx->needs_input_grad(0)) dx = torch::mm(dy, w).view(x.sizes());
  if (ctx->needs_input_grad(1)) dw = torch::mm(transposed_in_scratch(dy), x.reshape({-1, in}));
  if (bias && ctx->needs_input_grad(2)) db = dy.sum(0);
  if (bias) return {dx, dw, db};
  return {dx, dw};
}

struct LinearFn : torch::autograd::Function<LinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
    ctx->save_for_backward({x, w});
    return torch::linear(x, w, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*bias=*/true);
  }
};

// Without a bias (a custom function's tensor inputs must be defined).
struct LinearNoBiasFn : torch::autograd::Function<LinearNoBiasFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& w) {
    ctx->save_for_backward({x, w});
    return torch::linear(x, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return linear_backward(ctx, grads[0], /*bias=*/false);
  }
};

}  // namespace

bool native_bf16_linear_applies(const torch::Tensor& x, const torch::Tensor& w,
                                const torch::Tensor& b) {
  const bool bf16 = x.scalar_type() == torch::kBFloat16 && w.scalar_type() == torch::kBFloat16 &&
                    (!b.defined() || b.scalar_type() == torch::kBFloat16);
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  return bf16 && grad && x.is_cpu() && w.is_cpu() && x.dim() >= 2 && w.dim() == 2 &&
         x.size(-1) == w.size(1);
}

torch::Tensor native_bf16_linear(const torch::Tensor& x, const torch::Tensor& w,
                                 const torch::Tensor& b) {
  ZOFF_CHECK_ARG(native_bf16_linear_applies(x, w, b), "native_bf16_linear: x ", x.sizes(), " ",
                 x.scalar_type(), ", w ", w.sizes(), " ", w.scalar_type(),
                 ": expected bf16 CPU operands, x [..., in], w [out, in], under autograd");
  return b.defined() ? LinearFn::apply(x, w, b) : LinearNoBiasFn::apply(x, w);
}

torch::Tensor transpose_16bit(const torch::Tensor& t) {
  ZOFF_CHECK_ARG(t.dim() == 2 && t.element_size() == 2 && t.is_cpu(),
                 "transpose_16bit: ", t.sizes(), " ", t.scalar_type(),
                 ": expected a 2-D 16-bit CPU tensor");
  const auto src = t.contiguous();
  auto out = torch::empty({src.size(1), src.size(0)}, src.options());
  transpose_into(src, out);
  return out;
}

}  // namespace zoff::models
