// large_block_cache.h: freed large blocks served again, never more mapped than the peak of
// live bytes, small blocks and a disabled cache passed through, clean errors.
#include "zoff/core/large_block_cache.h"

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/core/heap_policy.h"
#include "zoff/core/huge_pages.h"

namespace zoff::large_block_cache_test {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// Small enough that the tests map little; large enough to be several huge pages.
constexpr size_t kMin = 4 * kMiB;

// Whether [data, data + bytes) is mapped at all (mincore fails with ENOMEM on a hole).
bool mapped(const void* data, size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((bytes + page - 1) / page);
  return mincore(const_cast<void*>(data), bytes, pages.data()) == 0;
}

TEST(LargeBlockCache, AFreedBlockServesTheNextRequestOfItsSize) {
  LargeBlockCache cache(kMin);
  void* first = nullptr;
  {
    c10::DataPtr a = cache.allocate(5 * kMiB + 3);
    first = a.get();
    std::memset(first, 7, 5 * kMiB + 3);  // every byte asked for is writable
    EXPECT_EQ(cache.stats().live_bytes, 6 * kMiB) << "rounded up to whole 2 MiB pages";
  }
  EXPECT_EQ(cache.stats().cached_bytes, 6 * kMiB);
  EXPECT_TRUE(mapped(first, 6 * kMiB)) << "a freed block must stay mapped for reuse";
  c10::DataPtr b = cache.allocate(5 * kMiB);
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(static_cast<const char*>(b.get())[0], 7) << "not zeroed again";
  const LargeBlockCacheStats s = cache.stats();
  EXPECT_EQ(s.mapped, 1);
  EXPECT_EQ(s.reused, 1);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.live_bytes, 6 * kMiB);
  b.clear();
  cache.release_cached();
  EXPECT_FALSE(mapped(first, 6 * kMiB)) << "release_cached left the block mapped";
}

TEST(LargeBlockCache, AReusedBlockWastesAtMostAnEighth) {
  LargeBlockCache cache(kMin);
  void* sixteen = cache.allocate(16 * kMiB).get();  // freed at once: cached
  EXPECT_EQ(cache.stats().cached_bytes, 16 * kMiB);
  {
    c10::DataPtr fourteen = cache.allocate(14 * kMiB + 1);  // 16 MiB after rounding: fits
    EXPECT_EQ(fourteen.get(), sixteen);
  }
  c10::DataPtr twelve = cache.allocate(12 * kMiB);  // 16 > 12 + 12/8: a fresh block
  EXPECT_NE(twelve.get(), sixteen);
  EXPECT_EQ(cache.stats().reused, 1);
}

TEST(LargeBlockCache, SmallRequestsGoToTheDefaultAllocator) {
  LargeBlockCache cache(kMin);
  c10::DataPtr small = cache.allocate(kMin - 1);
  ASSERT_NE(small.get(), nullptr);
  EXPECT_EQ(small.get_deleter(), c10::GetDefaultCPUAllocator()->allocate(1).get_deleter());
  const LargeBlockCacheStats s = cache.stats();
  EXPECT_EQ(s.mapped + s.reused, 0);
  EXPECT_EQ(s.live_bytes, 0u);
}

// The cache maps no more than the most bytes ever live at once: a request that no cached
// block fits first unmaps the least recently freed blocks.
TEST(LargeBlockCache, AFreshMappingFirstUnmapsCachedBlocksBeyondThePeak) {
  LargeBlockCache cache(kMin);
  void* a = nullptr;
  void* b = nullptr;
  {
    c10::DataPtr pa = cache.allocate(8 * kMiB);
    c10::DataPtr pb = cache.allocate(8 * kMiB);
    a = pa.get();
    b = pb.get();
    pa.clear();  // a freed first: the oldest
  }
  EXPECT_EQ(cache.stats().peak_live_bytes, 16 * kMiB);
  EXPECT_EQ(cache.stats().cached_bytes, 16 * kMiB);
  c10::DataPtr c = cache.allocate(12 * kMiB);  // 0 live + 16 cached + 12 > 16: evict
  LargeBlockCacheStats s = cache.stats();
  EXPECT_EQ(s.evicted, 2) << "16 cached + 12 new > the 16 MiB peak until both are gone";
  EXPECT_EQ(s.cached_bytes, 0u);
  // The kernel may put the new 12 MiB where a or b was; what is outside it is gone.
  const auto* at = static_cast<const char*>(c.get());
  for (const void* old : {a, b}) {
    const auto* p = static_cast<const char*>(old);
    if (p + 8 * kMiB <= at || p >= at + 12 * kMiB) {
      EXPECT_FALSE(mapped(old, 8 * kMiB));
    }
  }
  c.clear();
  c10::DataPtr d = cache.allocate(4 * kMiB);  // 12 cached + 4 <= the 16 MiB peak: none goes
  s = cache.stats();
  EXPECT_EQ(s.evicted, 2);
  EXPECT_EQ(s.cached_bytes, 12 * kMiB);
  EXPECT_LE(s.live_bytes + s.cached_bytes, s.peak_live_bytes);
}

TEST(LargeBlockCache, MappedBytesStayWithinThePeakUnderRandomUseFromTwoThreads) {
  LargeBlockCache cache(kMin);
  auto work = [&cache](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<c10::DataPtr> held;
    for (int i = 0; i < 400; ++i) {
      if (held.size() < 6 && rng() % 3 != 0) {
        held.push_back(cache.allocate((4 + rng() % 12) * kMiB + rng() % kMiB));
        static_cast<char*>(held.back().get())[0] = 1;
      } else if (!held.empty()) {
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(rng() % held.size()));
      }
      const LargeBlockCacheStats s = cache.stats();
      EXPECT_LE(s.live_bytes + s.cached_bytes, s.peak_live_bytes);
    }
  };
  std::thread other(work, 2u);
  work(1u);
  other.join();
  const LargeBlockCacheStats s = cache.stats();
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_GT(s.reused, 0);
  cache.release_cached();
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
}

TEST(LargeBlockCache, DisabledItPassesEverythingThroughAndUnmapsWhatItKept) {
  LargeBlockCache cache(kMin);
  c10::DataPtr live = cache.allocate(8 * kMiB);
  void* live_data = live.get();
  void* kept = cache.allocate(8 * kMiB).get();  // freed at once: cached
  cache.set_enabled(false);
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(mapped(kept, 8 * kMiB)) << "the cached block stays mapped when disabled";
  c10::DataPtr passed = cache.allocate(8 * kMiB);
  EXPECT_EQ(passed.get_deleter(), c10::GetDefaultCPUAllocator()->allocate(1).get_deleter());
  live.clear();  // allocated while enabled, freed after: unmapped, not cached
  EXPECT_FALSE(mapped(live_data, 8 * kMiB));
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
  EXPECT_EQ(cache.stats().live_bytes, 0u);
}

TEST(LargeBlockCache, RawAllocationsOfBothSizesComeBackThroughRawDeleter) {
  LargeBlockCache cache(kMin);
  void* large = cache.raw_allocate(6 * kMiB);
  void* small = cache.raw_allocate(1000);
  cache.raw_deallocate(small);
  cache.raw_deallocate(large);
  EXPECT_EQ(cache.stats().cached_bytes, 6 * kMiB);
  EXPECT_EQ(cache.stats().live_bytes, 0u);
}

TEST(LargeBlockCache, ABlockThatOutlivesItsCacheIsUnmappedWhenFreed) {
  c10::DataPtr survivor;
  void* data = nullptr;
  {
    LargeBlockCache cache(kMin);
    survivor = cache.allocate(6 * kMiB);
    data = survivor.get();
  }
  ASSERT_TRUE(mapped(data, 6 * kMiB));
  survivor.clear();
  EXPECT_FALSE(mapped(data, 6 * kMiB));
}

TEST(LargeBlockCache, AMinimumBelowAHugePageIsRefusedNamingIt) {
  try {
    LargeBlockCache cache(kHugePageBytes - 1);
    FAIL() << "a minimum below 2 MiB was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(kHugePageBytes - 1)), std::string::npos)
        << e.what();
  }
}

// Through LibTorch: once the heap policy keeps large blocks, a freed 40 MiB tensor's pages
// serve the next one; the RSS-first policy keeps none (in child processes: the allocator
// is process-wide).
void reuse_a_tensor_and_exit(bool keep_large_blocks) {
  keep_freed_memory_for_reuse(kHeapReuseMmapBytes, kHeapReuseTrimBytes, keep_large_blocks);
  const int64_t before = large_block_cache().stats().reused;
  for (int i = 0; i < 3; ++i) torch::ones({40 << 20}, torch::kUInt8);
  const int64_t reused = large_block_cache().stats().reused - before;
  std::exit(reused == (keep_large_blocks ? 2 : 0) ? 0 : 1);
}

TEST(LargeBlockCache, TheHeapPolicyRoutesLibTorchsLargeTensorsThroughIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(reuse_a_tensor_and_exit(true), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(reuse_a_tensor_and_exit(false), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace zoff::large_block_cache_test
