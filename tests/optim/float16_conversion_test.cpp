// fp32 -> bf16/fp16 conversions (scalar and fused, every SIMD target) against LibTorch's .to().
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <random>

#include "optim_test_support.h"
#include "zoff/optim/kernels.h"

namespace zoff::optim::float16_conversion_test {
namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Special values, rounding ties of both formats, fp16 overflow/subnormal edges, and random
// bit patterns (every exponent, NaNs and denormals included).
std::vector<float> conversion_inputs() {
  std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,               // zeros, infinities
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFC12345u, 0x7FBFFFFFu,  // NaNs
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u, 0x00000001u, 0x807FFFFFu,  // extremes, denormals
      0x3F808000u, 0x3F818000u, 0x3F80C000u, 0x3F807FFFu,  // bf16 ties (even, odd) and near
      0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FFFFFu, 0x47800000u,  // fp16 max / overflow
      0x38800000u, 0x387FFFFFu, 0x33800000u, 0x33000000u, 0x33000001u,  // fp16 min normal/sub
      0x33C00000u, 0x34400000u, 0x38000000u, 0x37FFF000u, 0x3F801000u, 0x3F803000u,
  };
  std::mt19937 rng(12345);
  for (int i = 0; i < 1 << 18; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  // Dense sampling of the fp16 range, where rounding and subnormals matter most.
  std::uniform_int_distribution<uint32_t> fp16_range(0x33000000u, 0x47800000u);
  for (int i = 0; i < 1 << 18; ++i) {
    uint32_t b = fp16_range(rng) | (rng() & 1u ? 0x80000000u : 0u);
    bits.push_back(b);
  }
  std::vector<float> values;
  values.reserve(bits.size());
  for (uint32_t b : bits) values.push_back(from_bits(b));
  return values;
}

std::vector<uint16_t> torch_convert(const std::vector<float>& values, torch::Dtype dtype) {
  auto t = torch::from_blob(const_cast<float*>(values.data()),
                            {static_cast<int64_t>(values.size())}, torch::kFloat32)
               .to(dtype)
               .contiguous();
  const auto* p = static_cast<const uint16_t*>(t.data_ptr());
  return std::vector<uint16_t>(p, p + values.size());
}

void expect_same_bits(const std::vector<float>& in, const std::vector<uint16_t>& got,
                      const std::vector<uint16_t>& want, const char* what) {
  size_t mismatches = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (got[i] != want[i] && mismatches++ < 5) {
      uint32_t b;
      std::memcpy(&b, &in[i], sizeof b);
      ADD_FAILURE() << what << ": input 0x" << std::hex << b << " -> 0x" << got[i]
                    << ", LibTorch 0x" << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

TEST(Float16Conversion, ScalarMatchesTorchBitForBit) {
  const auto in = conversion_inputs();
  std::vector<uint16_t> bf16(in.size()), fp16(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    bf16[i] = float_to_bf16(in[i]);
    fp16[i] = float_to_fp16(in[i]);
  }
  expect_same_bits(in, bf16, torch_convert(in, torch::kBFloat16), "bf16 scalar");
  expect_same_bits(in, fp16, torch_convert(in, torch::kHalf), "fp16 scalar");
}

TEST(Float16Conversion, FusedMatchesTorchBitForBitOnEveryTarget) {
  const auto in = conversion_inputs();
  const auto want_bf16 = torch_convert(in, torch::kBFloat16);
  const auto want_fp16 = torch_convert(in, torch::kHalf);
  testing::for_each_simd_level([&](SimdLevel) {
    // Odd start and length: the vector body, the one-lane tail and unaligned stores.
    const std::vector<float> odd(in.begin() + 1, in.end());
    std::vector<uint16_t> out(odd.size());
    fused_convert(odd.data(), odd.size(), CopyOut::kBf16, out.data());
    expect_same_bits(odd, out, {want_bf16.begin() + 1, want_bf16.end()}, "bf16 fused");
    fused_convert(odd.data(), odd.size(), CopyOut::kFp16, out.data());
    expect_same_bits(odd, out, {want_fp16.begin() + 1, want_fp16.end()}, "fp16 fused");
  });
}

TEST(Float16Conversion, NanStaysNan) {
  for (uint32_t b : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u}) {
    const float x = from_bits(b);
    const uint16_t bf = float_to_bf16(x);
    const uint16_t h = float_to_fp16(x);
    EXPECT_EQ(bf & 0x7F80u, 0x7F80u);
    EXPECT_NE(bf & 0x007Fu, 0u) << "bf16 NaN became inf";
    EXPECT_EQ(h & 0x7C00u, 0x7C00u);
    EXPECT_NE(h & 0x03FFu, 0u) << "fp16 NaN became inf";
  }
}

}  // namespace
}  // namespace zoff::optim::float16_conversion_test
