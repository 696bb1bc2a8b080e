// Plain scalar references of Adam over bf16 and int8 states: decode, reference_adam, encode.
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

void reference_adam_int8_states(const AdamCoefficients& c, float* params, const float* grads,
                                const Int8AdamStates& s, size_t n, CopyOut copy_out,
                                uint16_t* out16) {
  std::vector<float> m(kStateBlock), v(kStateBlock);  // one block's decoded states
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += kStateBlock) {
    const size_t len = std::min(kStateBlock, n - begin);
    for (size_t i = 0; i < len; ++i) {
      m[i] = decode_signed(s.exp_avg[begin + i], s.exp_avg_scales[b]);
      v[i] = decode_unsigned(s.exp_avg_sq[begin + i], s.exp_avg_sq_scales[b]);
    }
    reference_adam(c, params + begin, grads + begin, m.data(), v.data(), len, copy_out,
                   copy_out == CopyOut::kNone ? nullptr : out16 + begin);
    encode_int8_blocks(m.data(), len, true, reinterpret_cast<uint8_t*>(s.exp_avg + begin),
                       s.exp_avg_scales + b);
    encode_int8_blocks(v.data(), len, false, s.exp_avg_sq + begin, s.exp_avg_sq_scales + b);
  }
}

}  // namespace zoff::optim
