// The gradient kernels against LibTorch (the division) and fp64 sums (the squares), per SIMD
// target.
#include "zoff/optim/gradient_kernels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "optim_test_support.h"

namespace zoff::optim::gradient_kernels_test {
namespace {

using testing::for_each_simd_level;
using testing::kLengths;
using testing::kOffsets;
using testing::OffsetSpan;
using testing::randn;

// The sums of squares are accumulated in fp64 in different orders (per target lanes, one by
// one in the reference, pairwise in LibTorch): they agree to well within this, relative.
constexpr double kSquaresRelTol = 1e-12;

double torch_squares(const torch::Tensor& x) {
  return x.to(torch::kFloat64).square().sum().item<double>();
}

TEST(GradientKernels, DivisionEqualsLibTorchAndSquaresEqualFp64) {
  for (size_t n : kLengths) {
    for (size_t offset : kOffsets) {
      for (float divisor : {1.0f, 2.0f, 3.0f, 7.0f}) {
        const auto values = randn(n, 11 + n, 1e-2f);
        auto want = torch::from_blob(const_cast<float*>(values.data()), {static_cast<int64_t>(n)})
                        .clone()
                        .div_(static_cast<double>(divisor));
        const double want_squares = torch_squares(want);
        SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                     " divisor=" + std::to_string(divisor));
        for_each_simd_level([&](SimdLevel) {
          OffsetSpan grads(n, offset);
          grads.assign(values);
          const double squares = divide_and_sum_squares(grads.data(), n, divisor);
          ASSERT_EQ(std::memcmp(grads.data(), want.data_ptr<float>(), n * sizeof(float)), 0);
          EXPECT_NEAR(squares, want_squares, kSquaresRelTol * want_squares);
          EXPECT_NEAR(sum_squares(grads.data(), n), want_squares, kSquaresRelTol * want_squares);
        });
        OffsetSpan reference(n, offset);
        reference.assign(values);
        const double squares = reference_divide_and_sum_squares(reference.data(), n, divisor);
        ASSERT_EQ(std::memcmp(reference.data(), want.data_ptr<float>(), n * sizeof(float)), 0);
        EXPECT_NEAR(squares, want_squares, kSquaresRelTol * want_squares);
        EXPECT_NEAR(reference_sum_squares(reference.data(), n), want_squares,
                    kSquaresRelTol * want_squares);
      }
    }
  }
}

// The copying variant: dst gets what the in-place division leaves (divisor 1: src's bits,
// a NaN's payload too), src is untouched, and the squares are the same.
TEST(GradientKernels, CopyingDivisionEqualsTheInPlaceOne) {
  for (size_t n : kLengths) {
    for (size_t offset : kOffsets) {
      for (float divisor : {1.0f, 3.0f}) {
        auto values = randn(n, 5 + n, 1e-2f);
        if (n > 2) {  // a NaN with a payload of its own
          const uint32_t payload = 0x7fc01234u;
          std::memcpy(&values[n / 2], &payload, sizeof(payload));
        }
        SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                     " divisor=" + std::to_string(divisor));
        std::vector<float> want = values;
        const double want_squares = reference_divide_and_sum_squares(want.data(), n, divisor);
        for_each_simd_level([&](SimdLevel) {
          OffsetSpan src(n, offset), dst(n, (offset + 1) % 16);
          src.assign(values);
          const double squares = copy_divide_and_sum_squares(dst.data(), src.data(), n, divisor);
          ASSERT_EQ(std::memcmp(dst.data(), want.data(), n * sizeof(float)), 0);
          ASSERT_EQ(std::memcmp(src.data(), values.data(), n * sizeof(float)), 0);
          if (std::isnan(want_squares)) {
            EXPECT_TRUE(std::isnan(squares));
          } else {
            EXPECT_NEAR(squares, want_squares, kSquaresRelTol * want_squares);
          }
        });
        std::vector<float> reference(n);
        const double squares =
            reference_copy_divide_and_sum_squares(reference.data(), values.data(), n, divisor);
        ASSERT_EQ(std::memcmp(reference.data(), want.data(), n * sizeof(float)), 0);
        EXPECT_EQ(std::isnan(squares), std::isnan(want_squares));
      }
    }
  }
}

TEST(GradientKernels, EmptySpanIsZeroAndNonFiniteValuesPropagate) {
  EXPECT_EQ(divide_and_sum_squares(nullptr, 0, 2.0f), 0.0);
  EXPECT_EQ(sum_squares(nullptr, 0), 0.0);
  EXPECT_EQ(copy_divide_and_sum_squares(nullptr, nullptr, 0, 2.0f), 0.0);
  for_each_simd_level([&](SimdLevel) {
    std::vector<float> x(37, 1.0f);
    x[33] = std::numeric_limits<float>::infinity();  // past the full vectors on every target
    EXPECT_TRUE(std::isinf(divide_and_sum_squares(x.data(), x.size(), 2.0f)));
    x[33] = std::numeric_limits<float>::quiet_NaN();
    x[3] = 0.5f;
    EXPECT_TRUE(std::isnan(sum_squares(x.data(), x.size())));
  });
}

}  // namespace
}  // namespace zoff::optim::gradient_kernels_test
