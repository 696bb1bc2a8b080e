// Internal: the per-SIMD-target kernel of bf16_gemv (bf16 weights, fp32 inputs and sums).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::models::detail {

// Most rows of x one call multiplies (each weight row is read once for all of them).
inline constexpr size_t kGemvMaxRows = 4;

// For output columns n in [n0, n1) and rows r < rows (<= kGemvMaxRows):
//   y[r * N + n] = sum_k w[n * K + k] x[r * K + k]  (+ b[n] when b is not null)
// w: bf16 [N, K] row-major; x: fp32 [rows, K]; b: bf16 [N] or null; y: fp32 [rows, N].
// Sums in fp32, in lane order then across lanes.
void bf16_gemv(const uint16_t* w, const float* x, const uint16_t* b, size_t rows, size_t N,
               size_t K, size_t n0, size_t n1, float* y);

}  // namespace zoff::models::detail
