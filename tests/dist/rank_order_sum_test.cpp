// The one-pass rank-order sum against LibTorch's copy_ + add_ on the same rows, bit for bit.
#include "../../src/dist/rank_order_sum.h"  // white box: the fast path and its fallback

#include <gtest/gtest.h>

#include <limits>

namespace zoff::dist::rank_order_sum_test {
namespace {

// Rows with the values that expose a different order or a lossy widening: infinities, NaN,
// values whose sum overflows, subnormals, signed zeros; the rest random.
torch::Tensor special_row(int64_t n, int seed, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto row = torch::randn({n}, gen) * 1e3;
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            3e38f,
                            1e-40f,
                            -0.0f,
                            0.0f};
  for (int64_t i = 0; i < n && i < 7; ++i) row[(i * 613 + seed) % n] = specials[i];
  return row.to(dtype);
}

torch::Tensor torch_sum(const std::vector<torch::Tensor>& rows) {
  auto acc = torch::empty({rows[0].numel()});
  acc.copy_(rows[0]);
  for (size_t r = 1; r < rows.size(); ++r) acc.add_(rows[r]);
  return acc;
}

TEST(RankOrderSum, OnePassEqualsLibTorchsCopyAndAddBitForBit) {
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int ranks : {1, 2, 3}) {
      for (int64_t n : {1, 4095, 4096, 4097, 12345}) {  // around the 4096-element block
        std::vector<torch::Tensor> rows;
        for (int r = 0; r < ranks; ++r) rows.push_back(special_row(n, 11 * r + 1, dtype));
        auto out = torch::full({n}, -7.0f);
        sum_rows_in_order(rows, out);
        const auto expected = torch_sum(rows);
        SCOPED_TRACE(::testing::Message() << dtype << " ranks " << ranks << " n " << n);
        // Bit patterns, so NaN == NaN and -0 != +0 count.
        EXPECT_TRUE(torch::equal(out.view(torch::kInt), expected.view(torch::kInt)));
      }
    }
  }
}

TEST(RankOrderSum, OtherDtypesTakeLibTorchsRoute) {
  std::vector<torch::Tensor> rows{torch::arange(5, torch::kLong), torch::arange(5, torch::kLong)};
  auto out = torch::zeros({5}, torch::kLong);
  sum_rows_in_order(rows, out);
  EXPECT_TRUE(torch::equal(out, torch::arange(5, torch::kLong) * 2));
  // 16-bit output: the fp32 sum rounded once.
  std::vector<torch::Tensor> halves{special_row(100, 1, torch::kBFloat16),
                                    special_row(100, 2, torch::kBFloat16)};
  auto out16 = torch::empty({100}, torch::kBFloat16);
  sum_rows_in_order(halves, out16);
  EXPECT_TRUE(torch::equal(out16.view(torch::kShort),
                           torch_sum(halves).to(torch::kBFloat16).view(torch::kShort)));
}

// The parallel pass (SingleComm's) splits the blocks over LibTorch's threads: the same bits,
// including a last block cut short and a range just past one task's 64 blocks.
TEST(RankOrderSum, ParallelPassEqualsTheSerialOneBitForBit) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (int64_t n : {int64_t{64} * 4096 + 1, int64_t{300} * 4096 + 17}) {
      std::vector<torch::Tensor> rows;
      for (int r = 0; r < 3; ++r) rows.push_back(special_row(n, 5 * r + 2, dtype));
      auto serial = torch::empty({n});
      auto parallel = torch::full({n}, -7.0f);
      sum_rows_in_order(rows, serial);
      sum_rows_in_order(rows, parallel, /*parallel=*/true);
      EXPECT_TRUE(torch::equal(serial.isnan(), parallel.isnan())) << n;
      EXPECT_TRUE(torch::equal(torch::nan_to_num(serial), torch::nan_to_num(parallel))) << n;
      EXPECT_TRUE(torch::equal(torch::nan_to_num(serial), torch::nan_to_num(torch_sum(rows)))) << n;
    }
  }
  at::set_num_threads(threads);
}

}  // namespace
}  // namespace zoff::dist::rank_order_sum_test
