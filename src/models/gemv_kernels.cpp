// The kernel of gemv_kernels.h, compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "../optim/simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as the optim kernels.
#define HWY_TARGET_INCLUDE "../src/models/gemv_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "../optim/kernel_lanes-inl.h"
#include "gemv_kernels.h"
#include "zoff/optim/state_dtype.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace models {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using optim::HWY_NAMESPACE::load_bf16;

// One weight row against `kRows` rows of x: each weight vector is loaded and widened once.
// kU vectors of each row are summed into accumulators of their own, so that consecutive
// multiply-adds do not wait for each other (4 independent chains at one row).
template <size_t kRows>
HWY_INLINE void dot_rows(const uint16_t* HWY_RESTRICT w_row, const float* HWY_RESTRICT x, size_t K,
                         float* sums) {
  constexpr size_t kU = kRows >= 4 ? 1 : (kRows >= 2 ? 2 : 4);
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  hn::Vec<decltype(d)> acc[kU][kRows];
  for (size_t u = 0; u < kU; ++u) {
    for (size_t r = 0; r < kRows; ++r) acc[u][r] = hn::Zero(d);
  }
  size_t k = 0;
  for (; k + kU * lanes <= K; k += kU * lanes) {
    for (size_t u = 0; u < kU; ++u) {
      const auto wv = load_bf16(d, w_row + k + u * lanes);
      for (size_t r = 0; r < kRows; ++r) {
        acc[u][r] = hn::MulAdd(wv, hn::LoadU(d, x + r * K + k + u * lanes), acc[u][r]);
      }
    }
  }
  for (; k + lanes <= K; k += lanes) {
    const auto wv = load_bf16(d, w_row + k);
    for (size_t r = 0; r < kRows; ++r)
      acc[0][r] = hn::MulAdd(wv, hn::LoadU(d, x + r * K + k), acc[0][r]);
  }
  for (size_t r = 0; r < kRows; ++r) {
    for (size_t u = 1; u < kU; ++u) acc[0][r] = hn::Add(acc[0][r], acc[u][r]);
    float s = hn::GetLane(hn::SumOfLanes(d, acc[0][r]));
    for (size_t j = k; j < K; ++j) s += optim::bf16_to_float(w_row[j]) * x[r * K + j];
    sums[r] = s;
  }
}

template <size_t kRows>
void gemv_rows(const uint16_t* HWY_RESTRICT w, const float* HWY_RESTRICT x,
               const uint16_t* HWY_RESTRICT b, size_t N, size_t K, size_t n0, size_t n1,
               float* HWY_RESTRICT y) {
  float sums[kRows];
  for (size_t n = n0; n < n1; ++n) {
    dot_rows<kRows>(w + n * K, x, K, sums);
    const float bias = b != nullptr ? optim::bf16_to_float(b[n]) : 0.0f;
    for (size_t r = 0; r < kRows; ++r) y[r * N + n] = sums[r] + bias;
  }
}

void Bf16Gemv(const uint16_t* HWY_RESTRICT w, const float* HWY_RESTRICT x,
              const uint16_t* HWY_RESTRICT b, size_t rows, size_t N, size_t K, size_t n0, size_t n1,
              float* HWY_RESTRICT y) {
  switch (rows) {
    case 1:
      return gemv_rows<1>(w, x, b, N, K, n0, n1, y);
    case 2:
      return gemv_rows<2>(w, x, b, N, K, n0, n1, y);
    case 3:
      return gemv_rows<3>(w, x, b, N, K, n0, n1, y);
    default:
      return gemv_rows<4>(w, x, b, N, K, n0, n1, y);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace models
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::models::detail {

HWY_EXPORT(Bf16Gemv);

void bf16_gemv(const uint16_t* w, const float* x, const uint16_t* b, size_t rows, size_t N,
               size_t K, size_t n0, size_t n1, float* y) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(Bf16Gemv)(w, x, b, rows, N, K, n0, n1, y);
}

}  // namespace zoff::models::detail
#endif  // HWY_ONCE
