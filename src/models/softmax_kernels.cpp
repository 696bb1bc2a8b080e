// The kernels of softmax_kernels.h, compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "../optim/simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as the optim kernels.
#define HWY_TARGET_INCLUDE "../src/models/softmax_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// After highway.h, in a block of its own (clang-format keeps the order): per target, Exp.
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../optim/kernel_lanes-inl.h"
#include "softmax_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace models {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using optim::HWY_NAMESPACE::load_bf16;
using optim::HWY_NAMESPACE::store_out16;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Rows are walked in whole vectors. The last one, partly past the causal prefix, is read
// and written whole where the row has room (its extra lanes are the row's own future: masked
// in the arithmetic, zeroed after the stores) and through a padded copy only at the end of a
// row whose length is not a multiple of the lanes. A one-lane loop instead would cost one
// exp per element on AVX-512, doubling the row's time at gpt small's lengths.
HWY_INLINE V load_bf16_part(D d, const uint16_t* HWY_RESTRICT src, size_t count, size_t room) {
  if (room >= hn::Lanes(d)) return load_bf16(d, src);
  HWY_ALIGN uint16_t part[hn::MaxLanes(D())] = {};
  std::memcpy(part, src, count * sizeof(uint16_t));
  return load_bf16(d, part);
}

HWY_INLINE void store_bf16_part(D d, V v, uint16_t* HWY_RESTRICT dst, size_t count, size_t room) {
  if (room >= hn::Lanes(d)) return store_out16<optim::CopyOut::kBf16>(d, v, dst);
  HWY_ALIGN uint16_t part[hn::MaxLanes(D())];
  store_out16<optim::CopyOut::kBf16>(d, v, part);
  std::memcpy(dst, part, count * sizeof(uint16_t));
}

// One row: n = its causal prefix; `x` a scratch row of at least n + Lanes floats.
void causal_row_forward(const uint16_t* HWY_RESTRICT s, uint16_t* HWY_RESTRICT y, size_t n,
                        size_t T, float scale, float* HWY_RESTRICT x) {
  const D d;
  const size_t L = hn::Lanes(d);
  const auto minus_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  auto top = minus_inf;
  for (size_t j = 0; j < n; j += L) {  // x = scale s; lanes past n: -inf, weight 0
    const size_t count = std::min(L, n - j);
    auto v = hn::Mul(load_bf16_part(d, s + j, count, T - j), hn::Set(d, scale));
    if (count < L) v = hn::IfThenElse(hn::FirstN(d, count), v, minus_inf);
    hn::StoreU(v, d, x + j);
    top = hn::Max(top, v);
  }
  top = hn::MaxOfLanes(d, top);
  auto sum = hn::Zero(d);
  for (size_t j = 0; j < n; j += L) {
    // Highway's Exp clamps its argument, NaN included: a NaN (or inf - inf) stays NaN here,
    // and makes the row NaN through the sum, as in LibTorch.
    const auto shifted = hn::Sub(hn::LoadU(d, x + j), top);
    const auto e = hn::IfThenElse(hn::IsNaN(shifted), shifted, hn::Exp(d, shifted));
    hn::StoreU(e, d, x + j);
    sum = hn::Add(sum, e);
  }
  const auto inv = hn::Div(hn::Set(d, 1.0f), hn::SumOfLanes(d, sum));
  for (size_t j = 0; j < n; j += L) {
    store_bf16_part(d, hn::Mul(hn::LoadU(d, x + j), inv), y + j, std::min(L, n - j), T - j);
  }
  std::memset(y + n, 0, (T - n) * sizeof(uint16_t));  // the future: weight 0
}

void CausalSoftmaxBf16Forward(const uint16_t* HWY_RESTRICT s, uint16_t* HWY_RESTRICT y, size_t T,
                              size_t row_begin, size_t row_end, float scale) {
  std::vector<float> x(T + hn::Lanes(D()));
  for (size_t r = row_begin; r < row_end; ++r) {
    causal_row_forward(s + r * T, y + r * T, r % T + 1, T, scale, x.data());
  }
}

// One row: dot = sum(y * dy) over the prefix, then dx = scale * y * (dy - dot).
void causal_row_backward(const uint16_t* HWY_RESTRICT y, const uint16_t* HWY_RESTRICT dy,
                         uint16_t* HWY_RESTRICT dx, size_t n, size_t T, float scale) {
  const D d;
  const size_t L = hn::Lanes(d);
  auto dot = hn::Zero(d);
  for (size_t j = 0; j < n; j += L) {
    const size_t count = std::min(L, n - j);
    auto yv = load_bf16_part(d, y + j, count, T - j);
    auto dyv = load_bf16_part(d, dy + j, count, T - j);
    if (count < L) {  // lanes past n may hold anything, NaN included: both factors 0
      const auto prefix = hn::FirstN(d, count);
      yv = hn::IfThenElseZero(prefix, yv);
      dyv = hn::IfThenElseZero(prefix, dyv);
    }
    dot = hn::MulAdd(yv, dyv, dot);
  }
  dot = hn::SumOfLanes(d, dot);
  for (size_t j = 0; j < n; j += L) {
    const size_t count = std::min(L, n - j);
    const auto yv = hn::Mul(load_bf16_part(d, y + j, count, T - j), hn::Set(d, scale));
    const auto g = hn::Mul(yv, hn::Sub(load_bf16_part(d, dy + j, count, T - j), dot));
    store_bf16_part(d, g, dx + j, count, T - j);
  }
  std::memset(dx + n, 0, (T - n) * sizeof(uint16_t));  // after the stores: it clears their tail
}

void CausalSoftmaxBf16Backward(const uint16_t* HWY_RESTRICT y, const uint16_t* HWY_RESTRICT dy,
                               uint16_t* HWY_RESTRICT dx, size_t T, size_t row_begin,
                               size_t row_end, float scale) {
  for (size_t r = row_begin; r < row_end; ++r) {
    causal_row_backward(y + r * T, dy + r * T, dx + r * T, r % T + 1, T, scale);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace models
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::models::detail {

HWY_EXPORT(CausalSoftmaxBf16Forward);
HWY_EXPORT(CausalSoftmaxBf16Backward);

void causal_softmax_bf16_forward(const uint16_t* s, uint16_t* y, size_t T, size_t row_begin,
                                 size_t row_end, float scale) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBf16Forward)(s, y, T, row_begin, row_end, scale);
}

void causal_softmax_bf16_backward(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t T,
                                  size_t row_begin, size_t row_end, float scale) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(CausalSoftmaxBf16Backward)(y, dy, dx, T, row_begin, row_end, scale);
}

}  // namespace zoff::models::detail
#endif  // HWY_ONCE
