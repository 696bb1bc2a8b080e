// Storage formats of optimizer states: names, sizes and the scalar int8 codecs.
#include "zoff/optim/state_dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "zoff/core/error.h"

namespace zoff::optim {
namespace {

// Round to nearest even of y in [0, max] (NaN and anything above saturate to max).
float round_code(float y, float max) {
  if (!(y <= max)) y = max;
  return std::nearbyint(y);  // the default rounding mode: nearest, ties to even
}

// factor when it is finite and scale is positive, else 0 (all codes 0).
float finite_factor(float factor, float scale) {
  return scale > 0.0f && factor < INFINITY ? factor : 0.0f;
}

}  // namespace

StateDtype parse_state_dtype(const std::string& name) {
  if (name == "fp32") return StateDtype::kFp32;
  if (name == "bf16") return StateDtype::kBf16;
  if (name == "int8") return StateDtype::kInt8;
  throw UsageError("optimizer: state_dtype = '" + name + "': must be fp32, bf16 or int8");
}

std::string state_dtype_name(StateDtype dtype) {
  switch (dtype) {
    case StateDtype::kFp32:
      return "fp32";
    case StateDtype::kBf16:
      return "bf16";
    case StateDtype::kInt8:
      return "int8";
  }
  return "unknown";
}

size_t state_storage_bytes(StateDtype dtype, size_t n) {
  switch (dtype) {
    case StateDtype::kFp32:
      return n * sizeof(float);
    case StateDtype::kBf16:
      return n * sizeof(uint16_t);
    case StateDtype::kInt8:
      return n + state_blocks(n) * sizeof(float);
  }
  return 0;
}

size_t stored_element_bytes(StateDtype dtype) {
  return dtype == StateDtype::kFp32 ? 4 : dtype == StateDtype::kBf16 ? 2 : 1;
}

int64_t round_sub_group(int64_t requested, size_t alignment, size_t numel, size_t state_bytes) {
  const auto per = static_cast<int64_t>(alignment / sizeof(uint16_t));
  const int64_t shard = (static_cast<int64_t>(numel) + per - 1) / per * per;
  if (state_bytes == sizeof(float))
    return std::max<int64_t>(per, std::min(requested / per * per, shard));
  // Every quantity is a power of two, so the largest is a multiple of the others. Rounded
  // up (never below the key's value), and no bigger than the shard rounded up to it.
  const auto m = std::max<int64_t>(
      {per, static_cast<int64_t>(kStateBlock), static_cast<int64_t>(alignment / state_bytes)});
  const int64_t up = (std::max<int64_t>(requested, 1) + m - 1) / m * m;
  return std::min(up, (static_cast<int64_t>(numel) + m - 1) / m * m);
}

float bit_sqrt(float y, uint32_t bias) {
  uint32_t bits;
  std::memcpy(&bits, &y, sizeof bits);
  bits = ((bits & 0x7FFFFFFFu) >> 1) + bias;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

float bit_square(float r, uint32_t bias) {
  uint32_t bits;
  std::memcpy(&bits, &r, sizeof bits);
  // Unsigned: below bit_sqrt(0) (the bias itself) clamps to it, whose inverse is +0; a set
  // sign bit is a large number, and the shift drops it.
  bits = (std::max(bits, bias) - bias) << 1;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

float signed_code_factor(float scale) { return finite_factor(kSignedCodeTop / scale, scale); }

float unsigned_code_factor(float scale) {
  return finite_factor(kUnsignedCodeTop / std::sqrt(scale), scale);
}

float signed_code_step(float scale) { return scale / kSignedCodeTop; }

float unsigned_code_step(float scale) { return scale / (kUnsignedCodeTop * kUnsignedCodeTop); }

int8_t encode_signed(float x, float factor) {
  const float scaled = x * factor;
  const float r = round_code(bit_sqrt(scaled, kSignedCodeBias), kSignedCodeMax);
  return static_cast<int8_t>(std::copysign(r, scaled));
}

float decode_signed(int8_t q, float scale) {
  return decode_signed_by_step(q, signed_code_step(scale));
}

float decode_signed_by_step(int8_t q, float step) {
  const auto r = static_cast<float>(q);
  // The sign goes on before the step (the same value; the SIMD decoder saves an instruction).
  return std::copysign(bit_square(r, kSignedCodeBias), r) * step;
}

uint8_t encode_unsigned(float x, float factor) {
  const float root = std::sqrt(x);  // the step's sqrt(v)
  return static_cast<uint8_t>(
      round_code(bit_sqrt(root * factor, kUnsignedCodeBias), kUnsignedCodeMax));
}

float decode_unsigned(uint8_t q, float scale) {
  return decode_unsigned_by_step(q, unsigned_code_step(scale));
}

float decode_unsigned_by_step(uint8_t q, float step) {
  const float b = bit_square(static_cast<float>(q), kUnsignedCodeBias);
  return b * b * step;
}

void encode_int8_blocks(const float* x, size_t n, bool is_signed, uint8_t* codes, float* scales) {
  for (size_t b = 0, lo = 0; lo < n; ++b, lo += kStateBlock) {
    const size_t hi = std::min(n, lo + kStateBlock);
    float absmax = 0.0f;
    for (size_t i = lo; i < hi; ++i) {
      const float a = std::fabs(x[i]);
      absmax = absmax < a ? a : absmax;  // the fused kernel's rule: NaN never wins
    }
    scales[b] = absmax;
    const float factor = is_signed ? signed_code_factor(absmax) : unsigned_code_factor(absmax);
    for (size_t i = lo; i < hi; ++i) {
      codes[i] = is_signed ? static_cast<uint8_t>(encode_signed(x[i], factor))
                           : encode_unsigned(x[i], factor);
    }
  }
}

float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &wide, sizeof x);
  return x;
}

}  // namespace zoff::optim
