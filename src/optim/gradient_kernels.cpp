// The gradient kernels of gradient_kernels.h, compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as in fused_kernels.cpp.
#define HWY_TARGET_INCLUDE "../src/optim/gradient_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>

#include "zoff/optim/gradient_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(dd) floats at src (divided by `divisor` when kDivide, stored to dst when kStore),
// squared in double and added to acc.
template <bool kDivide, bool kStore, class DD, class V>
HWY_INLINE void add_squares(DD dd, float* dst, const float* src, float divisor, V& acc) {
  const hn::Rebind<float, DD> df;  // as many floats as dd has doubles
  auto v = hn::LoadU(df, src);
  if constexpr (kDivide) v = hn::Div(v, hn::Set(df, divisor));
  if constexpr (kStore) hn::StoreU(v, df, dst);
  const auto wide = hn::PromoteTo(dd, v);
  acc = hn::MulAdd(wide, wide, acc);  // exact product, one rounding of the sum
}

// Two accumulators over full vectors (the FMA's latency would otherwise bound the loop),
// then one-lane vectors for the tail; the lanes are summed in order at the end. dst may be
// src (in place); with kStore false it is not written.
template <bool kDivide, bool kStore>
double squares_loop(float* dst, const float* src, size_t n, float divisor) {
  const hn::ScalableTag<double> dd;
  const size_t lanes = hn::Lanes(dd);
  auto acc0 = hn::Zero(dd), acc1 = hn::Zero(dd);
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    add_squares<kDivide, kStore>(dd, dst + i, src + i, divisor, acc0);
    add_squares<kDivide, kStore>(dd, dst + i + lanes, src + i + lanes, divisor, acc1);
  }
  HWY_ALIGN double folded[hn::MaxLanes(dd)];
  hn::Store(hn::Add(acc0, acc1), dd, folded);
  double total = 0;
  for (size_t k = 0; k < lanes; ++k) total += folded[k];
  const hn::CappedTag<double, 1> d1;
  for (; i < n; ++i) {
    auto one = hn::Zero(d1);
    add_squares<kDivide, kStore>(d1, dst + i, src + i, divisor, one);
    total += hn::GetLane(one);
  }
  return total;
}

double DivideSquaresKernel(float* x, size_t n, float divisor) {
  return squares_loop<true, true>(x, x, n, divisor);
}

double SumSquaresKernel(const float* x, size_t n) {
  // dst is never written with kStore false; x keeps its offsets defined.
  return squares_loop<false, false>(const_cast<float*>(x), x, n, 1.0f);
}

// Divisor 1 copies the bits unchanged (no division at all).
double CopyDivideSquaresKernel(float* dst, const float* src, size_t n, float divisor) {
  return divisor == 1.0f ? squares_loop<false, true>(dst, src, n, 1.0f)
                         : squares_loop<true, true>(dst, src, n, divisor);
}

}  // namespace HWY_NAMESPACE
}  // namespace optim
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::optim {

HWY_EXPORT(DivideSquaresKernel);
HWY_EXPORT(SumSquaresKernel);
HWY_EXPORT(CopyDivideSquaresKernel);

double divide_and_sum_squares(float* grads, size_t n, float divisor) {
  detail::ensure_simd_env_applied();
  return HWY_DYNAMIC_DISPATCH(DivideSquaresKernel)(grads, n, divisor);
}

double sum_squares(const float* x, size_t n) {
  detail::ensure_simd_env_applied();
  return HWY_DYNAMIC_DISPATCH(SumSquaresKernel)(x, n);
}

double copy_divide_and_sum_squares(float* dst, const float* src, size_t n, float divisor) {
  detail::ensure_simd_env_applied();
  return HWY_DYNAMIC_DISPATCH(CopyDivideSquaresKernel)(dst, src, n, divisor);
}

double reference_divide_and_sum_squares(float* grads, size_t n, float divisor) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    grads[i] /= divisor;
    total += static_cast<double>(grads[i]) * static_cast<double>(grads[i]);
  }
  return total;
}

double reference_copy_divide_and_sum_squares(float* dst, const float* src, size_t n,
                                             float divisor) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    dst[i] = divisor == 1.0f ? src[i] : src[i] / divisor;
    total += static_cast<double>(dst[i]) * static_cast<double>(dst[i]);
  }
  return total;
}

double reference_sum_squares(const float* x, size_t n) {
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return total;
}

}  // namespace zoff::optim
#endif  // HWY_ONCE
