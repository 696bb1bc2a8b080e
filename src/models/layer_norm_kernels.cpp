// The kernels of layer_norm_kernels.h, compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "../optim/simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as the optim kernels.
#define HWY_TARGET_INCLUDE "../src/models/layer_norm_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../optim/kernel_lanes-inl.h"
#include "layer_norm_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace models {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
// The bf16 load and the nearest-even store of the optimizer kernels (NaN stays NaN).
using optim::HWY_NAMESPACE::load_bf16;
using optim::HWY_NAMESPACE::store_out16;
// Full vectors over a row, then one-lane vectors for its tail.
using optim::HWY_NAMESPACE::for_each_block;

// The lanes of a vector accumulator and the one-lane tail's, summed.
template <class D, class D1>
HWY_INLINE float total(D d, hn::Vec<D> acc, D1 d1, hn::Vec<D1> tail) {
  return hn::GetLane(hn::SumOfLanes(d, acc)) + hn::GetLane(tail);
}

void LayerNormBf16Forward(const uint16_t* x, const float* w, const float* b, size_t rows,
                          size_t cols, float eps, uint16_t* y, float* mean, float* rstd,
                          float* row) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  for (size_t r = 0; r < rows; ++r) {
    const uint16_t* HWY_RESTRICT xr = x + r * cols;
    auto s = hn::Zero(d);
    auto s1 = hn::Zero(d1);
    for_each_block(cols, [&](auto dd, size_t i) HWY_ATTR {
      const auto v = load_bf16(dd, xr + i);
      hn::StoreU(v, dd, row + i);
      if constexpr (hn::MaxLanes(decltype(dd)()) == 1) {
        s1 = hn::Add(s1, v);
      } else {
        s = hn::Add(s, v);
      }
    });
    const float m = total(d, s, d1, s1) / static_cast<float>(cols);
    // Two passes over the row (in L1): the variance of x - mean, not E[x^2] - mean^2.
    auto q = hn::Zero(d);
    auto q1 = hn::Zero(d1);
    for_each_block(cols, [&](auto dd, size_t i) HWY_ATTR {
      const auto t = hn::Sub(hn::LoadU(dd, row + i), hn::Set(dd, m));
      if constexpr (hn::MaxLanes(decltype(dd)()) == 1) {
        q1 = hn::MulAdd(t, t, q1);
      } else {
        q = hn::MulAdd(t, t, q);
      }
    });
    const float rs = 1.0f / std::sqrt(total(d, q, d1, q1) / static_cast<float>(cols) + eps);
    uint16_t* HWY_RESTRICT yr = y + r * cols;
    for_each_block(cols, [&](auto dd, size_t i) HWY_ATTR {
      const auto h = hn::Mul(hn::Sub(hn::LoadU(dd, row + i), hn::Set(dd, m)), hn::Set(dd, rs));
      store_out16<optim::CopyOut::kBf16>(
          dd, hn::MulAdd(h, hn::LoadU(dd, w + i), hn::LoadU(dd, b + i)), yr + i);
    });
    mean[r] = m;
    rstd[r] = rs;
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat = (x - mean) rstd.
void LayerNormBf16Backward(const uint16_t* dy, const uint16_t* x, const float* mean,
                           const float* rstd, const float* w, size_t rows, size_t cols,
                           uint16_t* dx, float* dw, float* db, float* scratch) {
  const hn::ScalableTag<float> d;
  const hn::CappedTag<float, 1> d1;
  float* HWY_RESTRICT xh = scratch;
  float* HWY_RESTRICT g = scratch + cols;
  for (size_t r = 0; r < rows; ++r) {
    const uint16_t* HWY_RESTRICT xr = x + r * cols;
    const uint16_t* HWY_RESTRICT dyr = dy + r * cols;
    auto sg = hn::Zero(d), sgx = hn::Zero(d);
    auto sg1 = hn::Zero(d1), sgx1 = hn::Zero(d1);
    for_each_block(cols, [&](auto dd, size_t i) HWY_ATTR {
      const auto dv = load_bf16(dd, dyr + i);
      const auto h =
          hn::Mul(hn::Sub(load_bf16(dd, xr + i), hn::Set(dd, mean[r])), hn::Set(dd, rstd[r]));
      const auto gv = hn::Mul(dv, hn::LoadU(dd, w + i));
      hn::StoreU(h, dd, xh + i);
      hn::StoreU(gv, dd, g + i);
      hn::StoreU(hn::MulAdd(dv, h, hn::LoadU(dd, dw + i)), dd, dw + i);
      hn::StoreU(hn::Add(dv, hn::LoadU(dd, db + i)), dd, db + i);
      if constexpr (hn::MaxLanes(decltype(dd)()) == 1) {
        sg1 = hn::Add(sg1, gv);
        sgx1 = hn::MulAdd(gv, h, sgx1);
      } else {
        sg = hn::Add(sg, gv);
        sgx = hn::MulAdd(gv, h, sgx);
      }
    });
    const float a = total(d, sg, d1, sg1) / static_cast<float>(cols);
    const float c = total(d, sgx, d1, sgx1) / static_cast<float>(cols);
    uint16_t* HWY_RESTRICT dxr = dx + r * cols;
    for_each_block(cols, [&](auto dd, size_t i) HWY_ATTR {
      const auto t = hn::NegMulAdd(hn::LoadU(dd, xh + i), hn::Set(dd, c),
                                   hn::Sub(hn::LoadU(dd, g + i), hn::Set(dd, a)));
      store_out16<optim::CopyOut::kBf16>(dd, hn::Mul(hn::Set(dd, rstd[r]), t), dxr + i);
    });
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace models
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::models::detail {

HWY_EXPORT(LayerNormBf16Forward);
HWY_EXPORT(LayerNormBf16Backward);

void layer_norm_bf16_forward(const uint16_t* x, const float* w, const float* b, size_t rows,
                             size_t cols, float eps, uint16_t* y, float* mean, float* rstd,
                             float* scratch) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(LayerNormBf16Forward)(x, w, b, rows, cols, eps, y, mean, rstd, scratch);
}

void layer_norm_bf16_backward(const uint16_t* dy, const uint16_t* x, const float* mean,
                              const float* rstd, const float* w, size_t rows, size_t cols,
                              uint16_t* dx, float* dw, float* db, float* scratch) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(LayerNormBf16Backward)
  (dy, x, mean, rstd, w, rows, cols, dx, dw, db, scratch);
}

}  // namespace zoff::models::detail
#endif  // HWY_ONCE
