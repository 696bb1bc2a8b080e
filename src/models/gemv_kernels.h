// Internal: the per-SIMD-target kernel of the few-row bf16 products (generation's products).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::models::detail {

// Most rows of x one call multiplies (each weight row is read once for all of them).
inline constexpr size_t kGemvMaxRows = 4;

// How far ahead of the row being summed the kernel asks for the weight's cache lines (into
// L2), in bytes, one line per vector loaded. The weights come from DRAM (every product reads
// another layer's weight) and the hardware prefetcher stops at each page: on huge pages, 2
// threads here, [8192, 2048] bf16 weights, 2 KiB ahead read at 26.4 GiB/s, 3 KiB ahead at
// 30.0 (LibTorch's one-row product 26.6, a pure read 30.9; bench/bench_gemv.cpp, one run).
inline constexpr size_t kGemvPrefetchBytes = 3072;

// For output columns n in [n0, n1) and rows r < rows (<= kGemvMaxRows):
//   y[r * N + n] = sum_k w[n * K + k] x[r * K + k]  (+ b[n] when b is not null)
// w: bf16 [N, K] row-major; x: bf16 [rows, K]; b: bf16 [N] or null; y: fp32 [rows, N].
// Products exact in fp32, sums in fp32 (lane order, then across lanes). On CPUs with
// AVX512-BF16, pairs of products are summed by vdpbf16ps, which treats subnormal inputs
// and results as zero (bf16 weights and activations of a trained model have none).
void bf16_gemv(const uint16_t* w, const uint16_t* x, const uint16_t* b, size_t rows, size_t N,
               size_t K, size_t n0, size_t n1, float* y);

// Whether bf16_gemv sums with vdpbf16ps on this CPU (for reports and tests).
bool bf16_gemv_uses_dot_products();

}  // namespace zoff::models::detail
