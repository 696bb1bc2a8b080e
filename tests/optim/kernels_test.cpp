// Every fused kernel against its plain scalar reference, on every SIMD target this CPU runs.
#include "zoff/optim/kernels.h"

#include <gtest/gtest.h>

#include "optim_test_support.h"

namespace zoff::optim::kernels_test {
namespace {

using testing::for_each_simd_level;
using testing::kLengths;
using testing::kOffsets;
using testing::kSteps;
using testing::OffsetSpan;
using testing::randn;

struct KernelCase {
  std::string label;
  OptimizerOptions options;
};

std::vector<KernelCase> kernel_cases() {
  std::vector<KernelCase> cases;
  auto add = [&](std::string label, OptimizerOptions o) { cases.push_back({label, o}); };
  OptimizerOptions o;
  o.type = "adamw";
  o.weight_decay = 0.0;
  add("adamw", o);
  o.weight_decay = 0.1;
  add("adamw_wd", o);
  o.type = "adam";
  o.weight_decay = 0.0;
  add("adam", o);
  o.weight_decay = 0.05;
  add("adam_wd", o);
  o = OptimizerOptions{};
  o.type = "sgd";
  o.lr = 0.05;
  add("sgd_plain", o);
  o.momentum = 0.9;
  o.dampening = 0.1;
  o.weight_decay = 0.01;
  add("sgd_momentum_dampening_wd", o);
  o.dampening = 0.0;
  o.nesterov = true;
  add("sgd_nesterov_wd", o);
  o = OptimizerOptions{};
  o.type = "adagrad";
  o.lr = 0.01;
  add("adagrad", o);
  o.lr_decay = 0.01;
  o.weight_decay = 0.02;
  o.initial_accumulator_value = 0.1;
  o.eps = 1e-10;
  add("adagrad_decay_wd_init", o);
  return cases;
}

// State buffers the kernel of `type` uses: Adam m and v, SGD's buffer, Adagrad's sum.
size_t state_count(const std::string& type) { return type == "adamw" || type == "adam" ? 2 : 1; }

// Runs kSteps steps of `type` on params/state with either the fused or the reference kernel.
void run_kernel(bool fused, const OptimizerOptions& o, float* p,
                const std::vector<std::vector<float>>& grads, float* s0, float* s1, size_t n,
                CopyOut copy_out, uint16_t* out16) {
  for (int step = 1; step <= kSteps; ++step) {
    const double lr = o.lr * (1.0 + 0.1 * step);  // a schedule: lr changes each step
    const float* g = grads[static_cast<size_t>(step - 1)].data();
    if (o.type == "adamw" || o.type == "adam") {
      const auto c = adam_coefficients(o, lr, step);
      (fused ? fused_adam : reference_adam)(c, p, g, s0, s1, n, copy_out, out16);
    } else if (o.type == "sgd") {
      const auto c = sgd_coefficients(o, lr, step);
      (fused ? fused_sgd : reference_sgd)(c, p, g, s0, n, copy_out, out16);
    } else {
      const auto c = adagrad_coefficients(o, lr, step);
      (fused ? fused_adagrad : reference_adagrad)(c, p, g, s0, n, copy_out, out16);
    }
  }
}

TEST(FusedKernels, MatchScalarReferenceOnEveryTarget) {
  for (const auto& kc : kernel_cases()) {
    SCOPED_TRACE(kc.label);
    for (size_t n : kLengths) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const auto p0 = randn(n, 1);
      std::vector<std::vector<float>> grads;
      for (int s = 0; s < kSteps; ++s) grads.push_back(randn(n, 100 + s, 0.1f));
      const float init = kc.options.type == "adagrad"
                             ? static_cast<float>(kc.options.initial_accumulator_value)
                             : 0.0f;
      // Reference once (aligned), then every target and misalignment against it.
      std::vector<float> rp = p0, rs0(n, init), rs1(n, 0.0f);
      run_kernel(false, kc.options, rp.data(), grads, rs0.data(), rs1.data(), n, CopyOut::kNone,
                 nullptr);
      for_each_simd_level([&](SimdLevel) {
        const std::vector<size_t> offsets =
            n > 100000 ? std::vector<size_t>{1, 3} : kOffsets;  // keep the big case quick
        for (size_t offset : offsets) {
          SCOPED_TRACE("offset = " + std::to_string(offset));
          OffsetSpan p(n, offset), s0(n, offset), s1(n, (offset + 1) % 4);
          p.assign(p0);
          std::fill(s0.data(), s0.data() + n, init);
          std::fill(s1.data(), s1.data() + n, 0.0f);
          run_kernel(true, kc.options, p.data(), grads, s0.data(), s1.data(), n, CopyOut::kNone,
                     nullptr);
          EXPECT_WITHIN_TOLERANCE(p.data(), rp.data(), n, "params");
          EXPECT_WITHIN_TOLERANCE(s0.data(), rs0.data(), n, "state 0");
          if (state_count(kc.options.type) == 2) {
            EXPECT_WITHIN_TOLERANCE(s1.data(), rs1.data(), n, "state 1");
          }
        }
      });
    }
  }
}

// The fused 16-bit copy is exactly the scalar conversion of the fp32 params it wrote.
TEST(FusedKernels, CopyOutIsTheRoundedUpdatedParams) {
  for (const auto& kc : kernel_cases()) {
    SCOPED_TRACE(kc.label);
    for (CopyOut format : {CopyOut::kBf16, CopyOut::kFp16}) {
      for (size_t n : {size_t{17}, size_t{1023}, size_t{4099}}) {
        for_each_simd_level([&](SimdLevel) {
          const auto p0 = randn(n, 7);
          std::vector<std::vector<float>> grads;
          for (int s = 0; s < kSteps; ++s) grads.push_back(randn(n, 200 + s, 0.1f));
          OffsetSpan p(n, 3), s0(n, 1), s1(n, 2);
          p.assign(p0);
          std::fill(s0.data(), s0.data() + n, 0.0f);
          std::fill(s1.data(), s1.data() + n, 0.0f);
          std::vector<uint16_t> out(n + 1, 0xABCD);
          run_kernel(true, kc.options, p.data(), grads, s0.data(), s1.data(), n, format,
                     out.data() + 1);  // 2-byte misaligned on purpose
          EXPECT_EQ(out[0], 0xABCD) << "wrote before the buffer";
          size_t mismatches = 0;
          for (size_t i = 0; i < n; ++i) {
            const uint16_t want =
                format == CopyOut::kBf16 ? float_to_bf16(p.data()[i]) : float_to_fp16(p.data()[i]);
            mismatches += out[i + 1] != want;
          }
          EXPECT_EQ(mismatches, 0u) << (format == CopyOut::kBf16 ? "bf16" : "fp16");
        });
      }
    }
  }
}

TEST(FusedKernels, ZeroLengthTouchesNothing) {
  for_each_simd_level([&](SimdLevel) {
    OptimizerOptions o;
    const auto c = adam_coefficients(o, 1e-3, 1);
    float p = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
    uint16_t out = 7;
    fused_adam(c, &p, &g, &m, &v, 0, CopyOut::kBf16, &out);
    EXPECT_EQ(p, 1.0f);
    EXPECT_EQ(out, 7);
  });
}

// The probe really streams: it changes all three written arrays and the 16-bit copy.
TEST(StreamProbe, WritesEveryStream) {
  const size_t n = 1029;
  std::vector<float> p(n, 1.0f), g(n, 0.5f), m(n, 2.0f), v(n, 3.0f);
  std::vector<uint16_t> out(n, 0);
  stream_probe(p.data(), g.data(), m.data(), v.data(), n, out.data());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(p[i], 1.5f);
    ASSERT_EQ(m[i], 2.5f);
    ASSERT_EQ(v[i], 3.5f);
    ASSERT_EQ(out[i], 0x3FC0);  // 1.5f truncated to bf16
  }
}

}  // namespace
}  // namespace zoff::optim::kernels_test
