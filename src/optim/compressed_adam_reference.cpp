// Plain scalar references of Adam over bf16 and int8 states (decode, update, encode), and the
// int8 kernel's update element by element.
#include <algorithm>
#include <cmath>
#include <vector>

#include "zoff/optim/compressed_adam.h"

namespace zoff::optim {

void reference_adam_bf16_states(const AdamCoefficients& c, float* params, const float* grads,
                                uint16_t* exp_avg, uint16_t* exp_avg_sq, size_t n, CopyOut copy_out,
                                uint16_t* out16) {
  for (size_t i = 0; i < n; ++i) {
    float m = bf16_to_float(exp_avg[i]);
    float v = bf16_to_float(exp_avg_sq[i]);
    reference_adam(c, params + i, grads + i, &m, &v, 1, copy_out,
                   copy_out == CopyOut::kNone ? nullptr : out16 + i);
    exp_avg[i] = float_to_bf16(m);
    exp_avg_sq[i] = float_to_bf16(v);
  }
}

float int8_m_step(const AdamCoefficients& c, float scale) {
  return signed_code_step(scale) * c.beta1;
}

float int8_v_step(const AdamCoefficients& c, float scale) {
  return unsigned_code_step(scale) * c.beta2;
}

float int8_inverse_bias_correction(const AdamCoefficients& c) {
  return 1.0f / c.bias_correction2_sqrt;
}

void int8_adam_update(const AdamCoefficients& c, float inv_bc2, float* p, float g, float* m,
                      float* v) {
  *p = *p * c.decay;
  if (c.l2 != 0.0f) g = std::fma(*p, c.l2, g);
  *m = std::fma(g, c.one_minus_beta1, *m);
  *v = std::fma(c.one_minus_beta2 * g, g, *v);
  const float denom = std::fma(std::sqrt(*v), inv_bc2, c.eps);
  *p = *p + (-c.step_size * *m) / denom;
}

void reference_adam_int8_states(const AdamCoefficients& c, float* params, const float* grads,
                                const Int8AdamStates& s, size_t n, CopyOut copy_out,
                                uint16_t* out16) {
  std::vector<float> m(kStateBlock), v(kStateBlock);  // one block's decoded states
  const float inv_bc2 = int8_inverse_bias_correction(c);
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kStateBlock) {
    const size_t len = std::min(kStateBlock, n - begin);
    const float m_step = int8_m_step(c, s.exp_avg_scales[b]);
    const float v_step = int8_v_step(c, s.exp_avg_sq_scales[b]);
    for (size_t i = 0; i < len; ++i) {
      m[i] = decode_signed_by_step(s.exp_avg[begin + i], m_step);
      v[i] = decode_unsigned_by_step(s.exp_avg_sq[begin + i], v_step);
      float* p = params + begin + i;
      int8_adam_update(c, inv_bc2, p, grads[begin + i], &m[i], &v[i]);
      if (copy_out != CopyOut::kNone) reference_copy_out(*p, copy_out, out16 + begin + i);
    }
    encode_int8_blocks(m.data(), len, true, reinterpret_cast<uint8_t*>(s.exp_avg + begin),
                       s.exp_avg_scales + b);
    encode_int8_blocks(v.data(), len, false, s.exp_avg_sq + begin, s.exp_avg_sq_scales + b);
  }
}

}  // namespace zoff::optim
