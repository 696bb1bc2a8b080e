// Placement::rss_first_heap: runs with parameters on disk keep freed activation blocks for the
// next step unless they are short of memory; Placement::keep_large_blocks: blocks above
// glibc's heap too, under the same condition.
#include <gtest/gtest.h>

#include <cstdint>

#include "zoff/config/config.h"
#include "zoff/placement/placement.h"

namespace zoff::placement {
namespace {

constexpr int64_t kGB = 1000000000;
constexpr int64_t kAvailable = 22 * kGB;  // MemAvailable of a 24 GB machine at start

// bf16 parameters of the presets (2 bytes each): gpt small 124M, xl 1.56B, 6.7b 6.65B.
TEST(RssFirstHeap, OnlyWhenTheParametersWouldTakeMoreThanAQuarterOfTheMemory) {
  EXPECT_FALSE(rss_first_heap(2 * 124000000LL, kAvailable));
  EXPECT_FALSE(rss_first_heap(2 * 1560000000LL, kAvailable));
  EXPECT_TRUE(rss_first_heap(2 * 6650000000LL, kAvailable));
  EXPECT_FALSE(rss_first_heap(kAvailable / 4, kAvailable));
  EXPECT_TRUE(rss_first_heap(kAvailable / 4 + 1, kAvailable));
  EXPECT_TRUE(rss_first_heap(1, 0));  // unknown memory: the careful choice
}

config::Config stage3(const char* params_device, int world) {
  const std::string json = std::string(R"({"train_batch_size": 4, "bf16": {"enabled": true},
      "zero_optimization": {"stage": 3,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/var/tmp"},
        "offload_param": {"device": ")") +
                           params_device + R"(", "nvme_path": "/var/tmp"}}})";
  return config::parse_config(json, world);
}

// The whole model's bf16 bytes are this rank's shard times the world: 2 ranks of 1e9
// elements are 4 GB of parameters, a quarter of 16 GB.
TEST(RssFirstHeap, ResolvedForParametersOnDiskFromTheWholeModelAndTheMemory) {
  PlacementContext ctx;
  ctx.world = 2;
  ctx.shard_elems = 1000000000;
  ctx.available_bytes = 16 * kGB;
  EXPECT_FALSE(resolve(stage3("nvme", 2), ctx).rss_first_heap);
  ctx.available_bytes = 16 * kGB - 4;
  EXPECT_TRUE(resolve(stage3("nvme", 2), ctx).rss_first_heap);
  ctx.available_bytes = 0;
  EXPECT_TRUE(resolve(stage3("nvme", 2), ctx).rss_first_heap);
  EXPECT_FALSE(resolve(stage3("cpu", 2), ctx).rss_first_heap);  // parameters in memory
}

// Blocks above glibc's heap are kept for the next step unless the run is short of memory
// (rss_first_heap): with the parameters in memory, or on disk with memory to spare.
TEST(KeepLargeBlocks, UnlessTheParametersAreOnDiskForWantOfMemory) {
  PlacementContext ctx;
  ctx.world = 2;
  ctx.shard_elems = 1000;
  ctx.available_bytes = 16 * kGB;
  EXPECT_TRUE(resolve(stage3("nvme", 2), ctx).keep_large_blocks());
  EXPECT_TRUE(resolve(stage3("cpu", 2), ctx).keep_large_blocks());
  EXPECT_TRUE(resolve(stage3("none", 2), ctx).keep_large_blocks());
  ctx.shard_elems = 1000000000;  // 4 GB of bf16 parameters: just over a quarter of the memory
  ctx.available_bytes = 16 * kGB - 4;
  EXPECT_FALSE(resolve(stage3("nvme", 2), ctx).keep_large_blocks());
  EXPECT_TRUE(resolve(stage3("cpu", 2), ctx).keep_large_blocks());
  ctx.available_bytes = 0;  // unknown memory
  EXPECT_FALSE(resolve(stage3("nvme", 2), ctx).keep_large_blocks());
}

}  // namespace
}  // namespace zoff::placement
