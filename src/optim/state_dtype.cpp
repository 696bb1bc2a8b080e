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

float block_inv_scale(float scale) {
  const float inv = 1.0f / scale;
  return scale > 0.0f && inv < INFINITY ? inv : 0.0f;
}

float block_inv_root_scale(float scale) {
  const float inv = 1.0f / std::sqrt(scale);
  return scale > 0.0f && inv < INFINITY ? inv : 0.0f;
}

int8_t encode_signed(float x, float inv_scale) {
  const float r = round_code(std::sqrt(std::fabs(x * inv_scale)) * 127.0f, 127.0f);
  return static_cast<int8_t>(std::copysign(r, x * inv_scale));
}

float decode_signed(int8_t q, float scale) {
  const float r = static_cast<float>(q) * kInvSignedMax;
  return r * std::fabs(r) * scale;
}

uint8_t encode_unsigned(float x, float inv_root_scale) {
  const float root = std::sqrt(x);  // the step's sqrt(v)
  return static_cast<uint8_t>(round_code(std::sqrt(root * inv_root_scale) * 255.0f, 255.0f));
}

float decode_unsigned(uint8_t q, float scale) {
  const float r = static_cast<float>(q) * kInvUnsignedMax;
  const float r2 = r * r;
  return r2 * r2 * scale;
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
    const float inv = is_signed ? block_inv_scale(absmax) : block_inv_root_scale(absmax);
    for (size_t i = lo; i < hi; ++i) {
      codes[i] =
          is_signed ? static_cast<uint8_t>(encode_signed(x[i], inv)) : encode_unsigned(x[i], inv);
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
