// ThreadPool runs a task on every thread; the span split respects cache lines.
#include "zoff/optim/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

#include "zoff/core/error.h"

namespace zoff::optim::thread_pool_test {
namespace {

TEST(ThreadPool, RunsEveryIndexOnceOnDistinctThreads) {
  ThreadPool pool(3);
  ASSERT_EQ(pool.size(), 3);
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> mask{0};
    std::mutex m;
    std::set<std::thread::id> ids;
    pool.run([&](int i) {
      mask.fetch_or(1 << i);
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(mask.load(), 0b111);
    EXPECT_EQ(ids.size(), 3u);
  }
}

// Workers poll for a while after a task and then sleep: runs that come back to back (found
// by polling), after a pause longer than the poll (found by the wake-up), and with more
// threads than cores must all run every index exactly once.
TEST(ThreadPool, BackToBackAndSpacedRunsEachRunEveryIndexOnce) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  constexpr int kRuns = 20000;
  for (int round = 0; round < kRuns; ++round) {
    pool.run([&](int i) { sum.fetch_add(i + 1); });
    if (round % 5000 == 0) std::this_thread::sleep_for(ThreadPool::kSpin * 20);
  }
  EXPECT_EQ(sum.load(), int64_t{kRuns} * (1 + 2 + 3 + 4));
}

TEST(ThreadPool, RethrowsAWorkersException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int i) {
    if (i == 1) throw std::runtime_error("worker failed");
  }),
               std::runtime_error);
  int calls = 0;
  pool.run([&](int i) {
    if (i == 0) ++calls;
  });
  EXPECT_EQ(calls, 1);  // still usable
}

TEST(ThreadPool, BadThreadCountIsUsageError) {
  EXPECT_THROW(ThreadPool(0), UsageError);
  EXPECT_THROW(ThreadPool(-3), UsageError);
  EXPECT_THROW(ThreadPool(ThreadPool::kMaxThreads + 1), UsageError);
}

TEST(SplitOnCacheLines, CoversTheSpanWithAlignedInnerBoundaries) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{17}, size_t{1000}, size_t{1000003}}) {
    for (int parts : {1, 2, 3, 7}) {
      for (size_t first : {size_t{0}, size_t{5}, size_t{15}}) {
        const auto b = split_on_cache_lines(n, parts, first, 1);
        ASSERT_EQ(b.size(), static_cast<size_t>(parts) + 1);
        EXPECT_EQ(b.front(), 0u);
        EXPECT_EQ(b.back(), n);
        for (size_t k = 1; k < b.size(); ++k) {
          EXPECT_LE(b[k - 1], b[k]);
          if (b[k] != 0 && b[k] != n) {
            EXPECT_EQ((b[k] - first) % kFloatsPerCacheLine, 0u);
          }
        }
      }
    }
  }
  // Balanced: each of 2 parts of 1e6 floats gets half, within one cache line.
  const auto b = split_on_cache_lines(1000000, 2, 0, 1);
  EXPECT_LE(b[1] > 500000 ? b[1] - 500000 : 500000 - b[1], kFloatsPerCacheLine);
}

TEST(SplitOnCacheLines, SmallSpansUseFewerParts) {
  const auto b = split_on_cache_lines(1000, 4, 0, 600);
  EXPECT_EQ(b[1], 1000u);  // one part does it all
}

TEST(FirstCacheLineIndex, FindsTheAlignedElement) {
  alignas(64) float data[32];
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ((i + first_cache_line_index(data + i)) % 16, 0u) << i;
  }
}

}  // namespace
}  // namespace zoff::optim::thread_pool_test
