// Tests of DistributedSampler: disjoint per-rank slices that tile the global batch, global
// batches independent of the world size, fresh shuffles per epoch, and bad sizes rejected.
#include "zoff/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "zoff/core/error.h"

namespace zoff::data::distributed_sampler_test {
namespace {

// Every micro-batch of every rank for one step, in (micro_index, rank) order.
std::vector<std::vector<int64_t>> all_slices(const DistributedSampler& s, int64_t step, int world,
                                             int64_t micro) {
  std::vector<std::vector<int64_t>> out;
  const int64_t accum = s.global_batch_size() / (micro * world);
  for (int64_t m = 0; m < accum; ++m) {
    for (int r = 0; r < world; ++r) out.push_back(s.micro_batch(step, r, world, m, micro));
  }
  return out;
}

TEST(DistributedSampler, EpochIsAPermutation) {
  DistributedSampler s(1000, 64, 7);
  std::vector<int64_t> perm = s.epoch_permutation(3);
  std::sort(perm.begin(), perm.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(perm[size_t(i)], i);
  EXPECT_EQ(s.steps_per_epoch(), 15);  // 1000 / 64, tail of 40 dropped
}

TEST(DistributedSampler, SlicesAreDisjointAndTileTheGlobalBatch) {
  DistributedSampler s(1000, 24, 11);
  for (int world : {1, 2, 3}) {
    for (int64_t step : {0, 5, 14, 41}) {
      const int64_t micro = 24 / (world * 2);  // accumulation 2
      std::vector<int64_t> joined;
      std::set<int64_t> seen;
      for (const auto& slice : all_slices(s, step, world, micro)) {
        ASSERT_EQ(int64_t(slice.size()), micro);
        for (int64_t i : slice) {
          EXPECT_TRUE(seen.insert(i).second) << "index " << i << " read twice";
          joined.push_back(i);
        }
      }
      EXPECT_EQ(joined, s.global_batch(step)) << "world " << world << " step " << step;
    }
  }
}

TEST(DistributedSampler, GlobalBatchIsInvariantAcrossWorldSizes) {
  DistributedSampler s(600, 12, 3);
  for (int64_t step = 0; step < 120; step += 7) {
    std::set<int64_t> reference;
    for (const auto& sl : all_slices(s, step, 1, 12)) reference.insert(sl.begin(), sl.end());
    for (auto [world, micro] : {std::pair{2, 3}, std::pair{3, 4}, std::pair{3, 2}}) {
      std::set<int64_t> got;
      for (const auto& sl : all_slices(s, step, world, micro)) got.insert(sl.begin(), sl.end());
      EXPECT_EQ(got, reference) << "world " << world << " micro " << micro;
    }
  }
}

TEST(DistributedSampler, StepsWalkTheEpochThenReshuffle) {
  DistributedSampler s(100, 10, 5);
  ASSERT_EQ(s.steps_per_epoch(), 10);
  EXPECT_EQ(s.epoch_of(9), 0);
  EXPECT_EQ(s.epoch_of(10), 1);
  std::set<int64_t> epoch0;
  for (int64_t step = 0; step < 10; ++step) {
    for (int64_t i : s.global_batch(step)) EXPECT_TRUE(epoch0.insert(i).second);
  }
  EXPECT_EQ(epoch0.size(), 100u);  // an epoch reads every sample exactly once
  EXPECT_NE(s.epoch_permutation(0), s.epoch_permutation(1));
  EXPECT_NE(s.global_batch(0), s.global_batch(10));
  // Same seed, another instance (another rank): the same order. Another seed: not.
  DistributedSampler same(100, 10, 5), other(100, 10, 6);
  EXPECT_EQ(same.global_batch(23), s.global_batch(23));
  EXPECT_NE(other.epoch_permutation(0), s.epoch_permutation(0));
}

// The order is part of the reproducibility contract (resumed runs, other platforms): pin it.
TEST(DistributedSampler, OrderIsPinned) {
  DistributedSampler s(10, 10, 42);
  const std::vector<int64_t> perm = s.epoch_permutation(0);
  DistributedSampler again(10, 5, 42);
  EXPECT_EQ(again.epoch_permutation(0), perm);  // batch size does not change the shuffle
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(perm, sorted);
}

TEST(DistributedSampler, BadSizesThrowUsageError) {
  EXPECT_THROW(DistributedSampler(10, 0, 1), UsageError);
  EXPECT_THROW(DistributedSampler(10, 11, 1), UsageError);
  DistributedSampler s(100, 12, 1);
  EXPECT_THROW(s.micro_batch(0, 0, 1, 0, 5), UsageError);   // 12 != 5 * accum * 1
  EXPECT_THROW(s.micro_batch(0, 0, 5, 0, 2), UsageError);   // 12 != 2 * accum * 5
  EXPECT_THROW(s.micro_batch(0, 2, 2, 0, 3), UsageError);   // rank out of range
  EXPECT_THROW(s.micro_batch(0, 0, 0, 0, 3), UsageError);   // world size 0
  EXPECT_THROW(s.micro_batch(0, 0, 2, 2, 3), UsageError);   // accum is 2
  EXPECT_THROW(s.micro_batch(-1, 0, 2, 0, 3), UsageError);  // negative step
  EXPECT_THROW(s.micro_batch(0, 0, 2, 0, 0), UsageError);   // micro 0
  try {
    s.micro_batch(0, 0, 1, 0, 5);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoff::data::distributed_sampler_test
