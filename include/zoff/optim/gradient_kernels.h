// One-pass kernels over a reduced fp32 gradient: the average over ranks and the norm's squares.
#pragma once

#include <cstddef>

namespace zoff::optim {

// Divides each of the n floats at `grads` by `divisor` in place (an IEEE float division, the
// same value as LibTorch's grads.div_(divisor)) and returns the sum of the squares of the
// results. Each square is exact in double (24 x 24 bits) and the sum is accumulated in double,
// so the norm is as good as fp64 allows whatever the order; the order is fixed per SIMD target.
// One pass over memory where the engine made three (div_, square, sum). Single-threaded,
// dispatched at run time like the optimizer kernels; no alignment needed.
double divide_and_sum_squares(float* grads, size_t n, float divisor);

// The sum of the squares of n floats, accumulated in double (read only).
double sum_squares(const float* x, size_t n);

// dst[i] = src[i] / divisor (divisor 1: the bits of src[i], no division) for n floats, and
// the sum of the squares of the results as above: a piece of a reduced gradient into a
// buffer of its own (the streamed and on-disk gradients' windows) in one pass, where
// copy_, div_, square and sum made four. dst and src must not overlap.
double copy_divide_and_sum_squares(float* dst, const float* src, size_t n, float divisor);

// Scalar references: the same divisions, squares summed one by one in double.
double reference_divide_and_sum_squares(float* grads, size_t n, float divisor);
double reference_copy_divide_and_sum_squares(float* dst, const float* src, size_t n, float divisor);
double reference_sum_squares(const float* x, size_t n);

}  // namespace zoff::optim
