// BlockCache: freed large blocks come back for the next allocation of their size, within a cap.
#include "zoff/core/block_cache.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "zoff/core/error.h"

namespace zoff {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(BlockCache, AFreedBlockServesTheNextAllocationOfItsSize) {
  BlockCache cache;
  cache.configure(4 * kMiB, 64 * kMiB);
  ASSERT_TRUE(cache.takes(5 * kMiB));
  void* a = cache.allocate(5 * kMiB + 100);
  std::memset(a, 0x5a, 5 * kMiB + 100);  // writable, all of it
  cache.release(a, 5 * kMiB + 100);
  EXPECT_EQ(cache.stats().cached_bytes, 5 * kMiB + static_cast<size_t>(getpagesize()));
  void* other = cache.allocate(6 * kMiB);  // another size: a new mapping
  EXPECT_NE(other, a);
  void* again = cache.allocate(5 * kMiB + 200);  // the same page-rounded size
  EXPECT_EQ(again, a);
  EXPECT_EQ(static_cast<unsigned char*>(again)[0], 0x5a);  // reused as it was, not zeroed
  const auto s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.cached_bytes, 0u);
  cache.release(again, 5 * kMiB + 200);
  cache.release(other, 6 * kMiB);
}

TEST(BlockCache, TheCapBoundsWhatItKeepsAndTheOldestGoFirst) {
  BlockCache cache;
  cache.configure(4 * kMiB, 16 * kMiB);
  void* a = cache.allocate(5 * kMiB);
  void* b = cache.allocate(6 * kMiB);
  void* c = cache.allocate(7 * kMiB);
  void* big = cache.allocate(20 * kMiB);
  cache.release(a, 5 * kMiB);
  cache.release(b, 6 * kMiB);
  cache.release(c, 7 * kMiB);  // 18 MiB > 16: a (the oldest) is unmapped
  EXPECT_EQ(cache.stats().cached_bytes, 13 * kMiB);
  EXPECT_EQ(cache.stats().cached_blocks, 2u);
  cache.release(big, 20 * kMiB);  // larger than the cap: unmapped at once
  EXPECT_EQ(cache.stats().cached_bytes, 13 * kMiB);
  EXPECT_EQ(cache.allocate(6 * kMiB), b);
  EXPECT_EQ(cache.allocate(7 * kMiB), c);
  EXPECT_EQ(cache.stats().hits, 2u);
  cache.configure(4 * kMiB, 8 * kMiB);
  cache.release(b, 6 * kMiB);
  cache.release(c, 7 * kMiB);  // 13 MiB > 8: b goes
  EXPECT_EQ(cache.stats().cached_bytes, 7 * kMiB);
  cache.configure(4 * kMiB, 4 * kMiB);  // a lower cap unmaps what no longer fits, now
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
}

TEST(BlockCache, TakesOnlyBlocksFromItsMinimumWhileItHasACap) {
  BlockCache cache;
  EXPECT_FALSE(cache.takes(64 * kMiB));  // not configured
  cache.configure(4 * kMiB, 64 * kMiB);
  EXPECT_FALSE(cache.takes(4 * kMiB - 1));
  EXPECT_TRUE(cache.takes(4 * kMiB));
  void* a = cache.allocate(4 * kMiB);
  cache.configure(4 * kMiB, 0);  // off: blocks handed out still come back, and are unmapped
  EXPECT_FALSE(cache.takes(64 * kMiB));
  cache.release(a, 4 * kMiB);
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
}

TEST(BlockCache, BadSizesAreRefusedNamingThem) {
  BlockCache cache;
  try {
    cache.configure(0, kMiB);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("min_bytes = 0"), std::string::npos) << e.what();
  }
  cache.configure(kMiB, kMiB);
  try {
    cache.allocate(0);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("a block of 0 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cache.allocate(size_t{1} << 62), Error);  // more than can be mapped
}

}  // namespace
}  // namespace zoff
