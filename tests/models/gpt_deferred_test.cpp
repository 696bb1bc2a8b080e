// A gpt built deferred (placeholders, unit::defer_parameters) holds one block at a time
// while it is built, and its initializer gives the eager model's values bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "zoff/core/process_memory.h"
#include "zoff/models/gpt.h"
#include "zoff/unit/deferred_init.h"

namespace zoff::models::gpt_deferred_test {
namespace {

// gpt medium is 117M parameters (468 MB in fp32); built deferred it takes one block's
// worth (9.6M parameters, 39 MB) at a time.
TEST(DeferredGpt, BuildingHoldsOneBlockNotTheModel) {
  ASSERT_TRUE(reset_peak_rss());
  const int64_t before = peak_rss_bytes();
  torch::manual_seed(3);
  Gpt gpt(gpt_preset("medium", 64), GptInit::kDeferred);
  const int64_t growth = peak_rss_bytes() - before;
  constexpr int64_t kMaxGrowth = int64_t{100} << 20;  // one block plus allocator slack
  EXPECT_LT(growth, kMaxGrowth) << "peak RSS grew " << growth << " bytes";
  std::printf("gpt medium built deferred: peak RSS +%.1f MB\n", double(growth) / 1e6);
}

TEST(DeferredGpt, InitializerGivesTheEagerValuesInAnyOrder) {
  const auto cfg = gpt_preset("tiny", 32);
  torch::manual_seed(5);
  Gpt eager(cfg);
  torch::manual_seed(5);
  Gpt deferred(cfg, GptInit::kDeferred);
  const auto init = deferred->initializer();
  auto params = eager->named_parameters();
  for (auto it = params.end(); it != params.begin();) {  // backwards: order must not matter
    --it;
    ASSERT_TRUE(unit::is_deferred(deferred->named_parameters()[it->key()]) ||
                it->value().numel() <= 1);
    auto v = torch::empty_like(it->value());
    init(it->key(), v);
    EXPECT_TRUE(torch::equal(v, it->value())) << it->key();
  }
}

}  // namespace
}  // namespace zoff::models::gpt_deferred_test
