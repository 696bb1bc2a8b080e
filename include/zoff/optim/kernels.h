// Raw optimizer kernels over flat fp32 spans: fused SIMD versions and plain scalar references.
#pragma once

#include <cstddef>
#include <cstdint>

#include "zoff/optim/shard_optimizer.h"

namespace zoff::optim {

// Per-step constants of Adam and AdamW, computed in double from the options, the lr of this
// step and the 1-based step number t (LibTorch counts the first step as t = 1), then rounded
// to float once, as LibTorch does when it multiplies a float tensor by a double scalar.
struct AdamCoefficients {
  float beta1 = 0, one_minus_beta1 = 0;  // m = beta1 m + (1 - beta1) g
  float beta2 = 0, one_minus_beta2 = 0;  // v = beta2 v + (1 - beta2) g^2
  float step_size = 0;                   // lr / (1 - beta1^t)
  float bias_correction2_sqrt = 0;       // sqrt(1 - beta2^t): every kernel divides by it
  float eps = 0;
  float decay = 1;  // AdamW's decoupled decay factor 1 - lr * weight_decay (1 for Adam)
  float l2 = 0;     // Adam's L2 weight decay added to the gradient (0 for AdamW)
};
AdamCoefficients adam_coefficients(const OptimizerOptions& options, double lr, int64_t t);

// SGD with momentum as torch::optim::SGD: d = g + wd p; buf = d on the first step, else
// buf = momentum buf + (1 - dampening) d; d = nesterov ? d + momentum buf : buf; p -= lr d.
struct SgdCoefficients {
  float lr = 0;
  float weight_decay = 0;
  float momentum = 0;  // 0: no momentum buffer (buf may be null)
  float one_minus_dampening = 1;
  bool nesterov = false;
  bool first_step = false;  // the buffer is initialised to d instead of being decayed
};
SgdCoefficients sgd_coefficients(const OptimizerOptions& options, double lr, int64_t t);

// Adagrad as torch::optim::Adagrad: d = g + wd p; sum += d^2; p -= clr d / (sqrt(sum) + eps)
// with clr = lr / (1 + (t - 1) lr_decay).
struct AdagradCoefficients {
  float clr = 0;
  float weight_decay = 0;
  float eps = 0;
};
AdagradCoefficients adagrad_coefficients(const OptimizerOptions& options, double lr, int64_t t);

// Fused kernels: one pass over n elements, single-threaded (the caller splits the work),
// dispatched at run time to the best SIMD target (see simd_dispatch.h). Pointers need no
// alignment. When copy_out != kNone, out16[i] receives the updated params[i] as bf16 or fp16.
void fused_adam(const AdamCoefficients& c, float* params, const float* grads, float* exp_avg,
                float* exp_avg_sq, size_t n, CopyOut copy_out, uint16_t* out16);
void fused_sgd(const SgdCoefficients& c, float* params, const float* grads, float* momentum_buffer,
               size_t n, CopyOut copy_out, uint16_t* out16);
void fused_adagrad(const AdagradCoefficients& c, float* params, const float* grads, float* sum,
                   size_t n, CopyOut copy_out, uint16_t* out16);
// Converts n floats to bf16 or fp16 (the same rounding as the fused copy-out).
void fused_convert(const float* src, size_t n, CopyOut format, uint16_t* out16);

// A streaming-bandwidth probe with the memory traffic of the Adam step (read p, g, m, v;
// write p, m, v: 28 bytes per element, plus 2 bytes when out16 is not null) and next to no
// arithmetic. The values it writes are meaningless; it exists to measure the memory bound.
void stream_probe(float* p, const float* g, float* m, float* v, size_t n, uint16_t* out16);

// A read-bandwidth probe: loads every byte of [p, p + bytes) once (a tail under 4 vectors is
// skipped) and returns the xor of what it read. The traffic of generation's one-row
// products, which read each weight once per token and write next to nothing.
uint64_t read_probe(const void* p, size_t bytes);

// Plain scalar references: simple loops that follow LibTorch's operation order.
// The 16-bit copy of one parameter as the references write it (nothing for kNone).
void reference_copy_out(float p, CopyOut copy_out, uint16_t* out);
void reference_adam(const AdamCoefficients& c, float* params, const float* grads, float* exp_avg,
                    float* exp_avg_sq, size_t n, CopyOut copy_out, uint16_t* out16);
void reference_sgd(const SgdCoefficients& c, float* params, const float* grads,
                   float* momentum_buffer, size_t n, CopyOut copy_out, uint16_t* out16);
void reference_adagrad(const AdagradCoefficients& c, float* params, const float* grads, float* sum,
                       size_t n, CopyOut copy_out, uint16_t* out16);

// fp32 -> bf16, round to nearest even. NaN -> 0xFFFF, the quiet NaN that LibTorch's
// Tensor::to(kBFloat16) writes (bit-for-bit the same as LibTorch for every input).
uint16_t float_to_bf16(float x);
// fp32 -> IEEE fp16, round to nearest even, overflow to inf, subnormals kept. NaN -> sign |
// 0x7E00 | the payload's top 9 bits, as LibTorch 2.x's Tensor::to(kHalf).
uint16_t float_to_fp16(float x);

}  // namespace zoff::optim
