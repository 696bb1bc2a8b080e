// Internal: the per-SIMD-target kernels of fused_causal_softmax (bf16 rows, fp32 inside).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::models::detail {

// Rows [row_begin, row_end) of square [T, T] score matrices stored back to back (row r is
// query r % T): y = softmax(scale * s) over the row's first r % T + 1 entries (the causal
// prefix), zeros after them, bf16 in and out, rounded to nearest even once.
void causal_softmax_bf16_forward(const uint16_t* s, uint16_t* y, size_t T, size_t row_begin,
                                 size_t row_end, float scale);

// The same rows of the backward: dx = scale * y * (dy - sum(y * dy)) over the causal prefix,
// zeros after it, rounded once.
void causal_softmax_bf16_backward(const uint16_t* y, const uint16_t* dy, uint16_t* dx, size_t T,
                                  size_t row_begin, size_t row_end, float scale);

}  // namespace zoff::models::detail
