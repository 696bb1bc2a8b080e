// Internal: the per-SIMD-target kernels of fused_layer_norm (bf16 rows, fp32 arithmetic).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::models::detail {

// Rows [0, rows) of x (bf16, row-major, cols per row): y = (x - mean) * rstd * w + b rounded
// to bf16 (nearest even), mean and rstd = 1 / sqrt(var + eps) kept per row (biased var).
// w, b: fp32, cols each. `scratch`: cols floats.
void layer_norm_bf16_forward(const uint16_t* x, const float* w, const float* b, size_t rows,
                             size_t cols, float eps, uint16_t* y, float* mean, float* rstd,
                             float* scratch);

// The gradients of those rows: dx (bf16) from dy (bf16), and dy * xhat, dy added into the fp32
// dw and db (cols each). `scratch`: 2 * cols floats.
void layer_norm_bf16_backward(const uint16_t* dy, const uint16_t* x, const float* mean,
                              const float* rstd, const float* w, size_t rows, size_t cols,
                              uint16_t* dx, float* dw, float* db, float* scratch);

}  // namespace zoff::models::detail
