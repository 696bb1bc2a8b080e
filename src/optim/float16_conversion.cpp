// Scalar fp32 -> bf16 / fp16 conversions with round to nearest even, bit-exact with LibTorch.
#include <cmath>
#include <cstring>

#include "zoff/optim/kernels.h"

namespace zoff::optim {

uint16_t float_to_bf16(float x) {
  if (std::isnan(x)) return 0xFFFFu;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  // Adding 0x7FFF plus the lowest kept bit rounds the dropped 16 bits to nearest even;
  // a carry into the exponent is the correct rounding up (up to inf).
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

uint16_t float_to_fp16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {
    // NaN: quiet, with the top 9 bits of the payload kept (what F16C's vcvtps2ph and
    // LibTorch 2.x's Tensor::to(kHalf) write).
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude & 0x7FFFFFu) >> 13));
  }
  // 65520 = 0x477FF000 is halfway between 65504 (largest fp16) and 2^16: it and all above
  // round to inf.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude < 0x38800000u) {
    // |x| < 2^-14, an fp16 subnormal or zero. In [0.5, 1) the float step is 2^-24, the fp16
    // subnormal step, so adding 0.5 lets the FPU round to nearest even for us.
    float a;
    std::memcpy(&a, &magnitude, sizeof a);
    const float shifted = a + 0.5f;
    uint32_t shifted_bits;
    std::memcpy(&shifted_bits, &shifted, sizeof shifted_bits);
    return static_cast<uint16_t>(sign | (shifted_bits - 0x3F000000u));
  }
  // Normal: rebias the exponent (127 -> 15, i.e. minus 112 << 23) and round the 13 dropped
  // mantissa bits to nearest even; a carry into the exponent is correct.
  const uint32_t odd = (magnitude >> 13) & 1u;
  return static_cast<uint16_t>(sign | ((magnitude - 0x38000000u + 0xFFFu + odd) >> 13));
}

}  // namespace zoff::optim
