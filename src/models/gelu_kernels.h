// Internal: the per-SIMD-target kernel of fused_gelu's backward (bf16 elements, fp32 inside).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::models::detail {

// dx[i] = dy[i] gelu'(x[i]) for i < n (the exact, erf GELU), bf16 in and out, rounded to
// nearest even once.
void gelu_bf16_backward(const uint16_t* dy, const uint16_t* x, size_t n, uint16_t* dx);

}  // namespace zoff::models::detail
