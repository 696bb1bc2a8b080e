// The kernels of gelu_kernels.h, compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "../optim/simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as the optim kernels.
#define HWY_TARGET_INCLUDE "../src/models/gelu_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
// After highway.h, in a block of its own (clang-format keeps the order): per target, Exp.
#include <hwy/contrib/math/math-inl.h>

#include <cstddef>
#include <cstdint>

#include "../optim/kernel_lanes-inl.h"
#include "gelu_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace models {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// The bf16 load and the nearest-even store of the optimizer kernels (NaN stays NaN).
using optim::HWY_NAMESPACE::load_bf16;
using optim::HWY_NAMESPACE::store_out16;
// Full vectors, then one-lane vectors for the tail.
using optim::HWY_NAMESPACE::for_each_block;

constexpr float kSqrtHalf = 0.70710678118654752f;    // 1 / sqrt(2): z = x / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi): phi(x) = e / sqrt(2 pi)
// Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2),
// t = 1 / (1 + p z), z >= 0; |error| <= 1.5e-7.
constexpr float kP = 0.3275911f;
constexpr float kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f;
constexpr float kA4 = -1.453152027f, kA5 = 1.061405429f;

// 1 + erf(z), given e = exp(-z^2). NaN z gives NaN (t is NaN).
template <class D>
HWY_INLINE hn::Vec<D> one_plus_erf(D d, hn::Vec<D> z, hn::Vec<D> e) {
  const auto one = hn::Set(d, 1.0f);
  const auto t = hn::Div(one, hn::MulAdd(hn::Set(d, kP), hn::Abs(z), one));
  auto poly = hn::MulAdd(hn::Set(d, kA5), t, hn::Set(d, kA4));
  poly = hn::MulAdd(poly, t, hn::Set(d, kA3));
  poly = hn::MulAdd(poly, t, hn::Set(d, kA2));
  poly = hn::MulAdd(poly, t, hn::Set(d, kA1));
  const auto erf_abs = hn::NegMulAdd(hn::Mul(poly, t), e, one);  // erf(|z|) = 1 - poly t e
  return hn::Add(one, hn::CopySignToAbs(erf_abs, z));
}

// gelu'(x) = Phi(x) + x phi(x), z = x / sqrt(2), Phi(x) = (1 + erf(z)) / 2,
// phi(x) = exp(-z^2) / sqrt(2 pi): the one exponential serves both.
void GeluBf16Backward(const uint16_t* HWY_RESTRICT dy, const uint16_t* HWY_RESTRICT x, size_t n,
                      uint16_t* HWY_RESTRICT dx) {
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    const auto xv = load_bf16(d, x + i);
    const auto z = hn::Mul(xv, hn::Set(d, kSqrtHalf));
    const auto e = hn::Exp(d, hn::Neg(hn::Mul(z, z)));  // exp(-z^2) = exp(-x^2 / 2)
    const auto cdf = hn::Mul(hn::Set(d, 0.5f), one_plus_erf(d, z, e));
    const auto pdf = hn::Mul(e, hn::Set(d, kInvSqrt2Pi));
    const auto grad = hn::Mul(load_bf16(d, dy + i), hn::MulAdd(xv, pdf, cdf));
    store_out16<optim::CopyOut::kBf16>(d, grad, dx + i);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace models
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::models::detail {

HWY_EXPORT(GeluBf16Backward);

void gelu_bf16_backward(const uint16_t* dy, const uint16_t* x, size_t n, uint16_t* dx) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(GeluBf16Backward)(dy, x, n, dx);
}

}  // namespace zoff::models::detail
#endif  // HWY_ONCE
