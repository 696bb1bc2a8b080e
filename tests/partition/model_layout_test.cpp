// Tests of ModelLayout: per-unit padding and shards, shard space, regions, unit buckets.
#include "zoff/partition/model_layout.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "partition/partition_test_support.h"
#include "zoff/core/error.h"

namespace zoff::partition::model_layout_test {
namespace {

using testing::make_params;

// Units {p0, p1}, {p2}, {p3, p4, p5}: 12, 30, 15 elements.
std::vector<UnitSpec> three_units() { return {{"a", {0, 1}}, {"b", {2}}, {"c", {3, 4, 5}}}; }

TEST(ModelLayout, UnitsAreLaidOutLastFirstEachPaddedToTheWorld) {
  auto params = make_params({11, 1, 30, 4, 9, 2});
  ModelLayout layout(params, three_units(), 4, /*shard_units=*/true);
  const auto& u = layout.units();
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[2].offset, 0);  // "c" first
  EXPECT_EQ(u[2].numel, 15);
  EXPECT_EQ(u[2].padded_numel, 16);
  EXPECT_EQ(u[1].offset, 16);
  EXPECT_EQ(u[1].padded_numel, 32);
  EXPECT_EQ(u[0].offset, 48);
  EXPECT_EQ(u[0].padded_numel, 12);
  EXPECT_EQ(layout.padded_numel(), 60);
  EXPECT_EQ(layout.shard_size(), 15);  // 4 + 8 + 3
  EXPECT_EQ(u[2].shard_offset, 0);
  EXPECT_EQ(u[1].shard_offset, 4);
  EXPECT_EQ(u[0].shard_offset, 12);
  // Parameters reversed inside a unit: p5 first in "c".
  EXPECT_EQ(layout.slots()[u[2].slots[0]].name, "p5");
  EXPECT_EQ(layout.slots()[u[2].slots[0]].offset, 0);
  EXPECT_EQ(layout.slots()[u[0].slots[1]].name, "p0");
  EXPECT_EQ(layout.slots()[u[0].slots[1]].offset, 49);
  EXPECT_EQ(layout.unit_of_slot(u[1].slots[0]), 1u);
  ASSERT_EQ(layout.regions().size(), 3u);
}

TEST(ModelLayout, RegionsCoverEveryRankShardSpaceOnce) {
  for (bool sharded : {false, true}) {
    for (int world : {1, 2, 3, 5}) {
      auto params = make_params({11, 1, 30, 4, 9, 2});
      ModelLayout layout(params, three_units(), world, sharded);
      int64_t covered = 0, space = 0;
      for (const auto& r : layout.regions()) {
        EXPECT_EQ(r.offset, covered);
        EXPECT_EQ(r.shard_size * world, r.padded_numel);
        EXPECT_EQ(r.shard_offset, space);
        covered += r.padded_numel;
        space += r.shard_size;
      }
      EXPECT_EQ(covered, layout.padded_numel());
      EXPECT_EQ(space, layout.shard_size());
      EXPECT_EQ(layout.numel(), 57);
    }
  }
}

TEST(ModelLayout, BucketsGroupWholeUnitsAndCoverTheBuffer) {
  auto params = make_params({11, 1, 30, 4, 9, 2});
  for (bool sharded : {false, true}) {
    ModelLayout layout(params, three_units(), 3, sharded);
    for (int64_t elems : {1, 20, 50, 1000}) {
      int64_t covered = 0, space = 0;
      size_t units = 0;
      for (const auto& b : layout.buckets(elems)) {
        EXPECT_EQ(b.offset, covered);
        EXPECT_EQ(b.shard_offset, space);
        covered += b.size;
        space += b.shard_size;
        units += b.units.size();
      }
      EXPECT_EQ(covered, layout.padded_numel());
      EXPECT_EQ(units, 3u);
      EXPECT_EQ(space, sharded ? layout.shard_size() : 0);
    }
    EXPECT_EQ(layout.buckets(1).size(), 3u);
    EXPECT_EQ(layout.buckets(1000).size(), 1u);
    EXPECT_EQ(layout.unit_buckets().size(), 3u);
  }
}

TEST(ModelLayout, RejectsBadPlansAndSizes) {
  auto params = make_params({3, 4});
  EXPECT_THROW(ModelLayout(params, {{"a", {0}}}, 2, true), Error);                 // p1 in no unit
  EXPECT_THROW(ModelLayout(params, {{"a", {0, 1}}, {"b", {1}}}, 2, true), Error);  // twice
  EXPECT_THROW(ModelLayout(params, {{"a", {0, 1}}}, 0, true), UsageError);
  ModelLayout layout(params, {{"a", {0, 1}}}, 2, true);
  EXPECT_THROW(layout.buckets(0), UsageError);
}

}  // namespace
}  // namespace zoff::partition::model_layout_test
