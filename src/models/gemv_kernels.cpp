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

constexpr size_t kLineBytes = 64;

// Vectors of a weight row summed per step, each into accumulators of its own: enough
// independent multiply-add chains (4 at one row of x) to keep up with the memory.
template <size_t kRows>
constexpr size_t kVectorsPerStep = kRows == 1 ? 4 : (kRows == 2 ? 2 : 1);

// Asks for the cache lines of the `bytes` at p, kGemvPrefetchBytes ahead, into L2
// (prefetcht1: L1's few line-fill buffers are what bound one core's misses in flight).
HWY_INLINE void prefetch_ahead(const uint16_t* p, size_t bytes) {
  const char* ahead = reinterpret_cast<const char*>(p) + detail::kGemvPrefetchBytes;
  for (size_t off = 0; off < bytes; off += kLineBytes) __builtin_prefetch(ahead + off, 0, 2);
}

// One weight row against kRows rows of x, both widened to fp32 (exact).
template <size_t kRows>
HWY_INLINE void dot_widened(const uint16_t* HWY_RESTRICT w_row, const uint16_t* HWY_RESTRICT x,
                            size_t K, float* HWY_RESTRICT sums) {
  constexpr size_t kV = kVectorsPerStep<kRows>;
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  hn::Vec<decltype(d)> acc[kV][kRows];
  HWY_UNROLL(4) for (size_t v = 0; v < kV; ++v) {
    HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) acc[v][r] = hn::Zero(d);
  }
  size_t k = 0;
  for (; k + kV * lanes <= K; k += kV * lanes) {
    prefetch_ahead(w_row + k, kV * lanes * sizeof(uint16_t));
    HWY_UNROLL(4) for (size_t v = 0; v < kV; ++v) {
      const auto wv = load_bf16(d, w_row + k + v * lanes);
      HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) {
        acc[v][r] = hn::MulAdd(wv, load_bf16(d, x + r * K + k + v * lanes), acc[v][r]);
      }
    }
  }
  HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4) for (size_t v = 1; v < kV; ++v) acc[0][r] = hn::Add(acc[0][r], acc[v][r]);
    float s = hn::GetLane(hn::SumOfLanes(d, acc[0][r]));
    for (size_t j = k; j < K; ++j) {
      s += optim::bf16_to_float(w_row[j]) * optim::bf16_to_float(x[r * K + j]);
    }
    sums[r] = s;
  }
}

#if HWY_TARGET <= HWY_AVX3
constexpr size_t kPairLanes = 32;  // bf16 values per 512-bit vector

// acc[i] += a[2i] b[2i] + a[2i+1] b[2i+1] (fp32). As an instruction, not an intrinsic:
// Highway 1.0.3's AVX-512 targets compile without AVX512_BF16.
HWY_INLINE __m512 dot_pairs(__m512 acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// dot_widened with vdpbf16ps: one instruction per 32 weights, no widening; the tail is
// loaded under a mask (zeros add nothing).
template <size_t kRows>
HWY_INLINE void dot_pairs_rows(const uint16_t* HWY_RESTRICT w_row, const uint16_t* HWY_RESTRICT x,
                               size_t K, float* HWY_RESTRICT sums) {
  constexpr size_t kV = kVectorsPerStep<kRows>;
  __m512 acc[kV][kRows];
  HWY_UNROLL(4) for (size_t v = 0; v < kV; ++v) {
    HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) acc[v][r] = _mm512_setzero_ps();
  }
  size_t k = 0;
  for (; k + kV * kPairLanes <= K; k += kV * kPairLanes) {
    HWY_UNROLL(4) for (size_t v = 0; v < kV; ++v) {
      prefetch_ahead(w_row + k + v * kPairLanes, kLineBytes);
      const __m512i wv = _mm512_loadu_si512(w_row + k + v * kPairLanes);
      HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) {
        const __m512i xv = _mm512_loadu_si512(x + r * K + k + v * kPairLanes);
        acc[v][r] = dot_pairs(acc[v][r], wv, xv);
      }
    }
  }
  for (; k < K; k += kPairLanes) {
    const size_t left = K - k;
    const __mmask32 mask = left >= kPairLanes ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
    const __m512i wv = _mm512_maskz_loadu_epi16(mask, w_row + k);
    HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) {
      acc[0][r] = dot_pairs(acc[0][r], wv, _mm512_maskz_loadu_epi16(mask, x + r * K + k));
    }
  }
  HWY_UNROLL(4) for (size_t r = 0; r < kRows; ++r) {
    HWY_UNROLL(4) for (size_t v = 1; v < kV; ++v) acc[0][r] = _mm512_add_ps(acc[0][r], acc[v][r]);
    sums[r] = _mm512_reduce_add_ps(acc[0][r]);
  }
}
#endif  // HWY_TARGET <= HWY_AVX3

template <size_t kRows, bool kPairs>
void gemv_rows_with(const uint16_t* HWY_RESTRICT w, const uint16_t* HWY_RESTRICT x,
                    const uint16_t* HWY_RESTRICT b, size_t N, size_t K, size_t n0, size_t n1,
                    float* HWY_RESTRICT y) {
  float sums[kRows];
  for (size_t n = n0; n < n1; ++n) {
#if HWY_TARGET <= HWY_AVX3
    if constexpr (kPairs) {
      dot_pairs_rows<kRows>(w + n * K, x, K, sums);
    } else {
      dot_widened<kRows>(w + n * K, x, K, sums);
    }
#else
    dot_widened<kRows>(w + n * K, x, K, sums);
#endif
    const float bias = b != nullptr ? optim::bf16_to_float(b[n]) : 0.0f;
    for (size_t r = 0; r < kRows; ++r) y[r * N + n] = sums[r] + bias;
  }
}

bool UsesDotProducts() {
#if HWY_TARGET <= HWY_AVX3
  return optim::detail::cpu_converts_bf16();
#else
  return false;
#endif
}

template <size_t kRows>
void gemv_rows(const uint16_t* HWY_RESTRICT w, const uint16_t* HWY_RESTRICT x,
               const uint16_t* HWY_RESTRICT b, size_t N, size_t K, size_t n0, size_t n1,
               float* HWY_RESTRICT y) {
  if (UsesDotProducts()) return gemv_rows_with<kRows, true>(w, x, b, N, K, n0, n1, y);
  gemv_rows_with<kRows, false>(w, x, b, N, K, n0, n1, y);
}

void Bf16Gemv(const uint16_t* HWY_RESTRICT w, const uint16_t* HWY_RESTRICT x,
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
HWY_EXPORT(UsesDotProducts);

void bf16_gemv(const uint16_t* w, const uint16_t* x, const uint16_t* b, size_t rows, size_t N,
               size_t K, size_t n0, size_t n1, float* y) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(Bf16Gemv)(w, x, b, rows, N, K, n0, n1, y);
}

bool bf16_gemv_uses_dot_products() {
  optim::detail::ensure_simd_env_applied();
  return HWY_DYNAMIC_DISPATCH(UsesDotProducts)();
}

}  // namespace zoff::models::detail
#endif  // HWY_ONCE
