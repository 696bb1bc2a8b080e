// Adam / AdamW kernels whose exp_avg and exp_avg_sq are stored compressed (bf16 or int8).
#pragma once

#include <cstddef>
#include <cstdint>

#include "zoff/optim/kernels.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::optim {

// The int8 states of one span of n elements (see state_dtype.h for the mappings). Codes are
// one byte per element; scales are one fp32 absmax per kStateBlock elements, state_blocks(n)
// of them, block 0 starting at the span's element 0 (the last block may be partial).
struct Int8AdamStates {
  int8_t* exp_avg = nullptr;  // n signed codes
  float* exp_avg_scales = nullptr;
  uint8_t* exp_avg_sq = nullptr;  // n unsigned codes
  float* exp_avg_sq_scales = nullptr;
};

// The int8 kernel's update, which is not fused_adam's: the decoders' steps carry beta1 and
// beta2 (the decoded values are beta1 m and beta2 v, rounded once), and the bias correction
// multiplies by its inverse, as DeepSpeed's cpu_adam does. Per element, with L2 = c.l2:
//   p = p decay;  g = fma(p, L2, g) when L2 != 0;  m = fma(g, 1 - b1, b1m);
//   v = fma((1 - b2) g, g, b2v);  p = p + (-step_size m) / fma(sqrt(v), inv_bc2, eps)
// Two multiplications and a division fewer than fused_adam per element, in a loop bound by
// its arithmetic (50M parameters, 2 threads: +11%); it differs from fused_adam's update by
// the roundings of those operations, far below the codes' own steps.
float int8_m_step(const AdamCoefficients& c, float scale);      // signed_code_step(scale) b1
float int8_v_step(const AdamCoefficients& c, float scale);      // unsigned_code_step(scale) b2
float int8_inverse_bias_correction(const AdamCoefficients& c);  // 1 / bias_correction2_sqrt
// One element of that update (the scalar reference's): *m in as b1 m, out as m; *v likewise.
void int8_adam_update(const AdamCoefficients& c, float inv_bc2, float* p, float g, float* m,
                      float* v);

// Fused: one pass over memory per element that decodes m and v, updates (bf16 states:
// exactly the update of fused_adam, same operations, same rounding order, so with states
// that bf16 holds exactly the params and the fp32 m, v before encoding equal fused_adam's bit
// for bit; int8 states: int8_adam_update), encodes m and v again and, when copy_out !=
// kNone, writes the params as bf16 / fp16 to out16. Single-threaded; pointers need no
// alignment. Dispatched like fused_adam.
// The int8 kernel works block by block: it keeps the block's new m and v (2 x 8 KiB) in
// fp32 scratch until the block's absmax is known, then encodes them from there (L1).
void fused_adam_bf16_states(const AdamCoefficients& c, float* params, const float* grads,
                            uint16_t* exp_avg, uint16_t* exp_avg_sq, size_t n, CopyOut copy_out,
                            uint16_t* out16);
void fused_adam_int8_states(const AdamCoefficients& c, float* params, const float* grads,
                            const Int8AdamStates& states, size_t n, CopyOut copy_out,
                            uint16_t* out16);

// stream_probe (kernels.h) with the memory traffic of fused_adam_bf16_states (dtype kBf16:
// exp_avg, exp_avg_sq are n uint16_t each) or fused_adam_int8_states (kInt8: n bytes each,
// block scales left out), both with the 16-bit copy-out (out16, n elements): read p, g, m, v,
// write p, m, v, out16, with one add per stream; 22 and 18 bytes per element. The bound a
// compressed kernel would reach if its arithmetic were free. The values it writes are
// meaningless. Throws zoff::UsageError for kFp32 (that is stream_probe) or a null out16.
void stream_probe_states(StateDtype dtype, float* params, const float* grads, void* exp_avg,
                         void* exp_avg_sq, size_t n, uint16_t* out16);

// Plain scalar references: decode with the scalar codecs, update (reference_adam; for int8
// states int8_adam_update), encode. The fused kernels equal them bit for bit on every SIMD target.
void reference_adam_bf16_states(const AdamCoefficients& c, float* params, const float* grads,
                                uint16_t* exp_avg, uint16_t* exp_avg_sq, size_t n, CopyOut copy_out,
                                uint16_t* out16);
void reference_adam_int8_states(const AdamCoefficients& c, float* params, const float* grads,
                                const Int8AdamStates& states, size_t n, CopyOut copy_out,
                                uint16_t* out16);

}  // namespace zoff::optim
