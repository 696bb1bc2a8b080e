// Adam over bf16 / int8 states: fused kernels against their scalar references (bitwise, every
// SIMD target), against the fp32 kernel's update, and the int8 codecs.
#include "zoff/optim/compressed_adam.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "optim_test_support.h"
#include "zoff/core/error.h"

namespace zoff::optim::compressed_adam_test {
namespace {

using testing::for_each_simd_level;
using testing::OffsetSpan;
using testing::randn;

// Sizes around the 2048-element block: one element, a partial only block, exactly one, one
// full plus one element, and a prime (48 full blocks and a partial one).
const std::vector<size_t> kBlockLengths = {1, 2047, 2048, 2049, 100003};
constexpr int kCompressedSteps = 6;
// The int8 update against fused_adam's on the same decoded states, relative to |p| plus the
// step's size: their roundings differ by an ulp or two of m, v and the denominator (1e-7 of
// the step), where a lost beta or bias correction would move the step by percents.
constexpr double kInt8UpdateRelTolerance = 1e-5;

std::vector<OptimizerOptions> adam_cases() {
  OptimizerOptions adamw;
  adamw.lr = 1e-2;
  adamw.weight_decay = 0.1;
  OptimizerOptions adam = adamw;
  adam.type = "adam";
  adam.weight_decay = 0.05;
  return {adamw, adam};
}

double lr_at(const OptimizerOptions& o, int step) { return o.lr * (1.0 + 0.1 * step); }

// Every state and output of one run, compared byte for byte.
struct Int8Run {
  std::vector<float> p;
  std::vector<int8_t> m;
  std::vector<uint8_t> v;
  std::vector<float> m_scales, v_scales;
  std::vector<uint16_t> out;
  explicit Int8Run(const std::vector<float>& p0)
      : p(p0),
        m(p0.size(), 0),
        v(p0.size(), 0),
        m_scales(state_blocks(p0.size()), 0.0f),
        v_scales(state_blocks(p0.size()), 0.0f),
        out(p0.size(), 0) {}
  Int8AdamStates states() { return {m.data(), m_scales.data(), v.data(), v_scales.data()}; }
};

template <class T>
size_t mismatches(const std::vector<T>& a, const std::vector<T>& b) {
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return count;
}

TEST(CompressedAdamKernels, Int8FusedEqualsReferenceBitwiseOnEveryTarget) {
  for (const auto& o : adam_cases()) {
    for (size_t n : kBlockLengths) {
      SCOPED_TRACE(o.type + " n = " + std::to_string(n));
      const auto p0 = randn(n, 11);
      Int8Run want(p0);
      for (int s = 1; s <= kCompressedSteps; ++s) {
        const auto g = randn(n, 300 + s, 0.1f);
        reference_adam_int8_states(adam_coefficients(o, lr_at(o, s), s), want.p.data(), g.data(),
                                   want.states(), n, CopyOut::kBf16, want.out.data());
      }
      for_each_simd_level([&](SimdLevel) {
        Int8Run got(p0);
        OffsetSpan p(n, 1 + n % 3);  // params off a cache line: unaligned loads and tails
        p.assign(p0);
        for (int s = 1; s <= kCompressedSteps; ++s) {
          const auto g = randn(n, 300 + s, 0.1f);
          fused_adam_int8_states(adam_coefficients(o, lr_at(o, s), s), p.data(), g.data(),
                                 got.states(), n, CopyOut::kBf16, got.out.data());
        }
        got.p = p.vec();
        EXPECT_EQ(mismatches(got.p, want.p), 0u) << "params";
        EXPECT_EQ(mismatches(got.m, want.m), 0u) << "exp_avg codes";
        EXPECT_EQ(mismatches(got.v, want.v), 0u) << "exp_avg_sq codes";
        EXPECT_EQ(mismatches(got.m_scales, want.m_scales), 0u) << "exp_avg scales";
        EXPECT_EQ(mismatches(got.v_scales, want.v_scales), 0u) << "exp_avg_sq scales";
        EXPECT_EQ(mismatches(got.out, want.out), 0u) << "bf16 copy-out";
      });
    }
  }
}

// The bf16 copy-out of subnormal and NaN parameters, which the one-instruction conversion
// (AVX512_BF16 CPUs) would flush or quiet: with lr = 0 the params stay as they are, and the
// copy-out equals the reference's, whole vectors of normal numbers beside them.
TEST(CompressedAdamKernels, Int8CopyOutOfSubnormalAndNanParamsEqualsReference) {
  const size_t n = 3 * 16 + 5;
  OptimizerOptions o = adam_cases()[0];
  const auto c = adam_coefficients(o, 0.0, 1);
  auto p0 = randn(n, 21);
  p0[3] = 1e-40f;                                      // vector 0: a subnormal
  p0[17] = -std::numeric_limits<float>::denorm_min();  // vector 1: another
  p0[20] = std::numeric_limits<float>::quiet_NaN();    // and a NaN beside it
  p0[49] = 3e-39f;                                     // the tail
  const auto g = randn(n, 22, 0.1f);
  Int8Run want(p0);
  reference_adam_int8_states(c, want.p.data(), g.data(), want.states(), n, CopyOut::kBf16,
                             want.out.data());
  ASSERT_EQ(want.out[3], float_to_bf16(1e-40f));  // kept subnormal, not flushed
  ASSERT_NE(want.out[3], 0u);
  for_each_simd_level([&](SimdLevel) {
    Int8Run got(p0);
    fused_adam_int8_states(c, got.p.data(), g.data(), got.states(), n, CopyOut::kBf16,
                           got.out.data());
    EXPECT_EQ(mismatches(got.out, want.out), 0u) << "bf16 copy-out";
    EXPECT_EQ(mismatches(got.p, want.p), 0u) << "params";
  });
}

TEST(CompressedAdamKernels, Bf16FusedEqualsReferenceBitwiseOnEveryTarget) {
  for (const auto& o : adam_cases()) {
    for (size_t n : kBlockLengths) {
      SCOPED_TRACE(o.type + " n = " + std::to_string(n));
      const auto p0 = randn(n, 12);
      std::vector<float> want_p = p0;
      std::vector<uint16_t> want_m(n, 0), want_v(n, 0), want_out(n, 0);
      for (int s = 1; s <= kCompressedSteps; ++s) {
        const auto g = randn(n, 400 + s, 0.1f);
        reference_adam_bf16_states(adam_coefficients(o, lr_at(o, s), s), want_p.data(), g.data(),
                                   want_m.data(), want_v.data(), n, CopyOut::kFp16,
                                   want_out.data());
      }
      for_each_simd_level([&](SimdLevel) {
        OffsetSpan p(n, 1 + n % 3);  // params off a cache line: unaligned loads and tails
        p.assign(p0);
        std::vector<uint16_t> m(n + 1, 0), v(n, 0), out(n, 0);
        for (int s = 1; s <= kCompressedSteps; ++s) {
          const auto g = randn(n, 400 + s, 0.1f);
          fused_adam_bf16_states(adam_coefficients(o, lr_at(o, s), s), p.data(), g.data(),
                                 m.data() + 1, v.data(), n, CopyOut::kFp16, out.data());
        }
        m.erase(m.begin());
        EXPECT_EQ(mismatches(p.vec(), want_p), 0u) << "params";
        EXPECT_EQ(mismatches(m, want_m), 0u) << "exp_avg";
        EXPECT_EQ(mismatches(v, want_v), 0u) << "exp_avg_sq";
        EXPECT_EQ(mismatches(out, want_out), 0u) << "fp16 copy-out";
      });
    }
  }
}

// With states that bf16 holds exactly, the bf16-state kernel's update is the fp32 kernel's:
// same params bit for bit, and the stored states are the fp32 states encoded. The int8
// kernel's is Adam's up to the roundings of int8_adam_update (its betas folded into the
// decoders, the bias correction's inverse): params within kInt8UpdateRelTolerance.
TEST(CompressedAdamKernels, UpdateIsTheFp32KernelsUpdate) {
  const size_t n = 4099;
  const auto o = adam_cases()[0];
  const auto c = adam_coefficients(o, o.lr, 3);
  const auto p0 = randn(n, 13);
  const auto g = randn(n, 14, 0.1f);
  const auto m_raw = randn(n, 15, 0.01f);
  for_each_simd_level([&](SimdLevel) {
    // bf16: states rounded to bf16 first.
    std::vector<uint16_t> m16(n), v16(n);
    std::vector<float> m(n), v(n), p = p0, p16 = p0;
    for (size_t i = 0; i < n; ++i) {
      m16[i] = float_to_bf16(m_raw[i]);
      v16[i] = float_to_bf16(m_raw[i] * m_raw[i] * 3.0f);
      m[i] = bf16_to_float(m16[i]);
      v[i] = bf16_to_float(v16[i]);
    }
    fused_adam(c, p.data(), g.data(), m.data(), v.data(), n, CopyOut::kNone, nullptr);
    fused_adam_bf16_states(c, p16.data(), g.data(), m16.data(), v16.data(), n, CopyOut::kNone,
                           nullptr);
    EXPECT_EQ(mismatches(p16, p), 0u) << "bf16 states: params";
    size_t states_off = 0;
    for (size_t i = 0; i < n; ++i) {
      states_off += m16[i] != float_to_bf16(m[i]) || v16[i] != float_to_bf16(v[i]);
    }
    EXPECT_EQ(states_off, 0u) << "bf16 states: stored m, v";

    // int8: random codes, decoded.
    Int8Run q(p0);
    for (size_t i = 0; i < n; ++i) {
      q.m[i] = static_cast<int8_t>(static_cast<int>(i * 37 % 255) - 127);
      q.v[i] = static_cast<uint8_t>(i * 91 % 256);
    }
    for (size_t b = 0; b < q.m_scales.size(); ++b) {
      q.m_scales[b] = 0.01f * static_cast<float>(b + 1);
      q.v_scales[b] = 1e-4f * static_cast<float>(b + 2);
    }
    std::vector<float> p8 = p0;
    for (size_t i = 0; i < n; ++i) {
      m[i] = decode_signed(q.m[i], q.m_scales[i / kStateBlock]);
      v[i] = decode_unsigned(q.v[i], q.v_scales[i / kStateBlock]);
    }
    p = p0;
    fused_adam(c, p.data(), g.data(), m.data(), v.data(), n, CopyOut::kNone, nullptr);
    fused_adam_int8_states(c, p8.data(), g.data(), q.states(), n, CopyOut::kNone, nullptr);
    size_t moved = 0;
    for (size_t i = 0; i < n; ++i) {
      const double size = std::fabs(p[i]) + std::fabs(p[i] - p0[i]);
      ASSERT_NEAR(p8[i], p[i], kInt8UpdateRelTolerance * size) << i;
      moved += p8[i] != p0[i];
    }
    EXPECT_EQ(moved, n) << "int8 states: every parameter takes its step";
  });
}

TEST(CompressedAdamKernels, ZeroLengthTouchesNothing) {
  for_each_simd_level([&](SimdLevel) {
    const auto c = adam_coefficients(OptimizerOptions{}, 1e-3, 1);
    float p = 1.0f, g = 1.0f, m_scale = 5.0f, v_scale = 6.0f;
    uint16_t m16 = 7, v16 = 8, out = 9;
    int8_t m8 = 3;
    uint8_t v8 = 4;
    fused_adam_bf16_states(c, &p, &g, &m16, &v16, 0, CopyOut::kBf16, &out);
    fused_adam_int8_states(c, &p, &g, {&m8, &m_scale, &v8, &v_scale}, 0, CopyOut::kBf16, &out);
    EXPECT_EQ(p, 1.0f);
    EXPECT_EQ(m16 + v16 + out + m8 + v8, 7 + 8 + 9 + 3 + 4);
    EXPECT_EQ(m_scale + v_scale, 11.0f);
  });
}

// bit_sqrt: sqrt at every power of four, between sqrt and 1.0607 sqrt elsewhere (the bound
// is (3/2) / sqrt(2), at y = 2 4^k), increasing; bit_square undoes it up to the bit it drops.
// Both ignore the sign bit.
TEST(StateCodecs, BitSqrtIsASquareRootCurveWithAnExactInverse) {
  constexpr double kMostAboveSqrt = 1.5 / std::sqrt(2.0);
  for (int k = -20; k <= 0; ++k) EXPECT_EQ(bit_sqrt(std::ldexp(1.0f, 2 * k)), std::ldexp(1.0f, k));
  float previous = bit_sqrt(0.0f);
  EXPECT_EQ(bit_square(previous), 0.0f);
  EXPECT_EQ(bit_square(0.0f), 0.0f);  // below bit_sqrt(0): clamped
  for (float y = 1e-12f; y <= 1.0f; y = std::nextafter(y * 1.0007f, 2.0f)) {
    const float z = bit_sqrt(y);
    ASSERT_GE(z, std::sqrt(y)) << y;
    ASSERT_LE(z, kMostAboveSqrt * std::sqrt(static_cast<double>(y)) * (1 + 1e-6)) << y;
    ASSERT_GT(z, previous) << y;
    previous = z;
    uint32_t bits;
    std::memcpy(&bits, &y, sizeof bits);
    bits &= ~1u;  // the bit the halving drops
    float even;
    std::memcpy(&even, &bits, sizeof even);
    ASSERT_EQ(bit_square(z), even) << y;
    EXPECT_EQ(bit_sqrt(-y), z);  // the sign bit is ignored
    EXPECT_EQ(bit_square(-z), even);
    // A power of two is in the bias: the codes' 128 and 256 levels.
    EXPECT_EQ(bit_sqrt(y, kSignedCodeBias), 128.0f * z);
    EXPECT_EQ(bit_square(256.0f * z, kUnsignedCodeBias), even);
  }
  // The block max is the top code exactly.
  EXPECT_EQ(bit_sqrt(kSignedCodeTop, kSignedCodeBias), kSignedCodeMax);
  EXPECT_EQ(bit_sqrt(kUnsignedCodeTop, kUnsignedCodeBias), kUnsignedCodeMax);
  EXPECT_EQ(bit_square(kSignedCodeMax, kSignedCodeBias), kSignedCodeTop);
  EXPECT_EQ(bit_square(kUnsignedCodeMax, kUnsignedCodeBias), kUnsignedCodeTop);
}

TEST(StateCodecs, Int8CodesRoundTripAndSaturate) {
  const float scale = 0.37f;
  const float m_factor = signed_code_factor(scale);
  const float v_factor = unsigned_code_factor(scale);
  for (int q = -127; q <= 127; ++q) {
    const auto code = static_cast<int8_t>(q);
    ASSERT_EQ(encode_signed(decode_signed(code, scale), m_factor), code) << q;
  }
  for (int q = 0; q <= 255; ++q) {
    const auto code = static_cast<uint8_t>(q);
    ASSERT_EQ(encode_unsigned(decode_unsigned(code, scale), v_factor), code) << q;
  }
  EXPECT_EQ(encode_signed(0.0f, m_factor), 0);
  EXPECT_EQ(encode_signed(-scale, m_factor), -127);
  EXPECT_EQ(encode_signed(10.0f, m_factor), 127);  // above the block max: saturates
  EXPECT_EQ(encode_unsigned(10.0f, v_factor), 255);
  EXPECT_EQ(encode_unsigned(std::nanf(""), v_factor), 255);  // defined, not UB
  EXPECT_EQ(signed_code_factor(0.0f), 0.0f);                 // an all-zero block encodes as zeros
  EXPECT_EQ(signed_code_factor(1e-45f), 0.0f);               // 1 / subnormal overflows
  EXPECT_EQ(unsigned_code_factor(0.0f), 0.0f);
  // Small values survive where linear int8 (step scale / 127) would round them to zero.
  EXPECT_NE(encode_signed(scale * 1e-4f, m_factor), 0);
  EXPECT_NE(encode_unsigned(scale * 1e-9f, v_factor), 0);
}

// Relative error of decode(encode(x)) for values spread over the range the maps are for.
// A code q = round(128 bit_sqrt(x t / s)) (t = kSignedCodeTop) is off by at most half a code;
// bit_square is piecewise linear with a slope that never falls as its argument grows, so half
// a code costs x at most 2 sqrt(2) (0.5 / 128) / sqrt(x t / s) = sqrt(2) / y relative,
// y = 128 sqrt(x t / s) (a true square root map: 1 / y). v's code is that of sqrt(v) with
// 256 levels, so v is off by at most (1 + sqrt(2) / y)^2 - 1, y = 256 sqrt(sqrt(x / s) u).
TEST(StateCodecs, Int8RelativeErrorBounds) {
  const float scale = 2.0f, m_factor = signed_code_factor(scale);
  double worst_m = 0, worst_v = 0;
  for (float x = 1e-4f * scale; x <= scale; x *= 1.01f) {
    const double y_m = 128.0 * std::sqrt(x * kSignedCodeTop / scale);
    const double m_err = std::fabs(decode_signed(encode_signed(-x, m_factor), scale) + x) / x;
    EXPECT_LE(m_err, std::sqrt(2.0) / y_m + 1e-6) << x;
    const double y_v = 256.0 * std::sqrt(std::sqrt(x / scale) * kUnsignedCodeTop);
    const double v_err =
        std::fabs(decode_unsigned(encode_unsigned(x, unsigned_code_factor(scale)), scale) - x) / x;
    EXPECT_LE(v_err, std::pow(1.0 + std::sqrt(2.0) / y_v, 2) - 1.0 + 1e-6) << x;
    if (x >= 0.01f * scale) {
      worst_m = std::max(worst_m, m_err);
      worst_v = std::max(worst_v, v_err);
    }
  }
  // Printed for the record: the worst error within two decades of the block max.
  std::printf("  int8 codecs, x in [s/100, s]: worst relative error m %.3g, v %.3g\n", worst_m,
              worst_v);
}

TEST(StateDtypeNames, ParseAndBytes) {
  EXPECT_EQ(parse_state_dtype("fp32"), StateDtype::kFp32);
  EXPECT_EQ(parse_state_dtype("bf16"), StateDtype::kBf16);
  EXPECT_EQ(parse_state_dtype("int8"), StateDtype::kInt8);
  for (const char* bad : {"fp8", "", "INT8", "float32"}) {
    try {
      parse_state_dtype(bad);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("state_dtype = '" + std::string(bad) + "'"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
    }
  }
  EXPECT_EQ(state_storage_bytes(StateDtype::kFp32, 4097), 4097u * 4);
  EXPECT_EQ(state_storage_bytes(StateDtype::kBf16, 4097), 4097u * 2);
  EXPECT_EQ(state_storage_bytes(StateDtype::kInt8, 4097), 4097u + 3 * 4);  // 3 blocks
  EXPECT_EQ(state_storage_bytes(StateDtype::kInt8, 0), 0u);
}

}  // namespace
}  // namespace zoff::optim::compressed_adam_test
