// The kernel of transpose_kernels.h, compiled per SIMD target by Highway.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "../optim/simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as the optim kernels.
#define HWY_TARGET_INCLUDE "../src/models/transpose_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "transpose_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace models {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows of `in` per strip: a strip's 8-column slices of 256 rows (256 cache lines) stay in
// L1 while the columns of those lines are written out, and each output row receives 256
// contiguous elements (512 bytes) at a time. Square tiles (64 x 64) write 64 lines 4 KiB
// apart whenever rows is a multiple of 2048: one L1 set, thrashed (measured on gpt medium's
// [2048, 3584] gradient: 7.6 ms against 3.5 with strips; PyTorch's copy 14.7 ms; memcpy 1.1).
constexpr size_t kStripRows = 256;
constexpr size_t kStripCols = 32;

void transpose_scalar(const uint16_t* HWY_RESTRICT in, size_t rows, size_t cols, size_t r0,
                      size_t r1, size_t c0, size_t c1, uint16_t* HWY_RESTRICT out) {
  for (size_t c = c0; c < c1; ++c) {
    for (size_t r = r0; r < r1; ++r) out[c * rows + r] = in[r * cols + c];
  }
}

#if HWY_TARGET != HWY_SCALAR
// One 8 x 8 tile through 128-bit vectors: interleaving 16-, 32- and 64-bit lanes of row
// pairs turns 8 rows into 8 columns (3 x 8 shuffles for 64 elements).
void transpose_8x8(const uint16_t* HWY_RESTRICT in, size_t ldi, uint16_t* HWY_RESTRICT out,
                   size_t ldo) {
  const hn::Full128<uint16_t> d16;
  const hn::Repartition<uint32_t, decltype(d16)> d32;
  const hn::Repartition<uint64_t, decltype(d16)> d64;
  using V16 = hn::Vec<decltype(d16)>;
  V16 a[8], b[8];
  for (size_t i = 0; i < 8; ++i) a[i] = hn::LoadU(d16, in + i * ldi);
  for (size_t i = 0; i < 8; i += 2) {  // b[i]: columns 0-3 of rows i, i+1; b[i+1]: 4-7
    b[i] = hn::InterleaveLower(d16, a[i], a[i + 1]);
    b[i + 1] = hn::InterleaveUpper(d16, a[i], a[i + 1]);
  }
  hn::Vec<decltype(d32)> c[8];
  for (size_t i = 0; i < 8; i += 4) {  // pairs of columns of 4 rows
    for (size_t h = 0; h < 2; ++h) {
      const auto lo = hn::BitCast(d32, b[i + h]), hi = hn::BitCast(d32, b[i + 2 + h]);
      c[i + 2 * h] = hn::InterleaveLower(d32, lo, hi);
      c[i + 2 * h + 1] = hn::InterleaveUpper(d32, lo, hi);
    }
  }
  for (size_t j = 0; j < 4; ++j) {  // c[j] holds columns 2j, 2j+1 of rows 0-3; c[j+4] of 4-7
    const auto lo = hn::BitCast(d64, c[j]), hi = hn::BitCast(d64, c[j + 4]);
    hn::StoreU(hn::BitCast(d16, hn::InterleaveLower(d64, lo, hi)), d16, out + (2 * j) * ldo);
    hn::StoreU(hn::BitCast(d16, hn::InterleaveUpper(d64, lo, hi)), d16, out + (2 * j + 1) * ldo);
  }
}
#endif

void TransposeU16(const uint16_t* HWY_RESTRICT in, size_t rows, size_t cols, size_t r0, size_t r1,
                  uint16_t* HWY_RESTRICT out) {
  for (size_t s0 = r0; s0 < r1; s0 += kStripRows) {
    const size_t s1 = std::min(r1, s0 + kStripRows);
    for (size_t c0 = 0; c0 < cols; c0 += kStripCols) {
      const size_t c1 = std::min(cols, c0 + kStripCols);
#if HWY_TARGET == HWY_SCALAR
      transpose_scalar(in, rows, cols, s0, s1, c0, c1, out);
#else
      const size_t rf = s0 + (s1 - s0) / 8 * 8, cf = c0 + (c1 - c0) / 8 * 8;
      for (size_t c = c0; c < cf; c += 8) {
        for (size_t r = s0; r < rf; r += 8) {
          transpose_8x8(in + r * cols + c, cols, out + c * rows + r, rows);
        }
      }
      transpose_scalar(in, rows, cols, s0, s1, cf, c1, out);  // the last < 8 columns
      transpose_scalar(in, rows, cols, rf, s1, c0, cf, out);  // the last < 8 rows
#endif
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace models
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::models::detail {

HWY_EXPORT(TransposeU16);

void transpose_u16(const uint16_t* in, size_t rows, size_t cols, size_t r0, size_t r1,
                   uint16_t* out) {
  optim::detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(TransposeU16)(in, rows, cols, r0, r1, out);
}

}  // namespace zoff::models::detail
#endif  // HWY_ONCE
