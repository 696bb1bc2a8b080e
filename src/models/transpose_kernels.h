// Internal: the per-SIMD-target kernel that transposes a matrix of 16-bit elements.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::models::detail {

// out[c * rows + r] = in[r * cols + c] for rows r0 <= r < r1 of `in` (rows x cols, row-major;
// out is cols x rows, row-major). Callers split [0, rows) between threads.
void transpose_u16(const uint16_t* in, size_t rows, size_t cols, size_t r0, size_t r1,
                   uint16_t* out);

}  // namespace zoff::models::detail
