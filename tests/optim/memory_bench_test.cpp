// The read probe reads every byte it is given (its xor names the words), and `zoff bench
// memory`'s runner reports a rate per pass and refuses bad options by name.
#include "zoff/optim/memory_bench.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/simd_dispatch.h"

namespace zoff::optim::memory_bench_test {
namespace {

// One marked word anywhere in a buffer of whole steps comes back as the probe's xor: a
// word skipped, or read twice (xor cancels), gives 0. At every SIMD level this CPU runs.
TEST(ReadProbe, LoadsEveryWordOnce) {
  constexpr size_t kWords = 4096;  // 32 KiB: whole 4-vector steps at every level
  constexpr uint64_t kMark = 0x0123456789ABCDEFull;
  for (const auto level : supported_simd_levels()) {
    force_simd_level(level);
    for (const size_t at : {size_t{0}, size_t{1}, size_t{777}, kWords - 1}) {
      std::vector<uint64_t> data(kWords, 0);
      data[at] = kMark;
      EXPECT_EQ(read_probe(data.data(), kWords * sizeof(uint64_t)), kMark)
          << simd_level_name(level) << " word " << at;
    }
  }
  force_simd_level(SimdLevel::kBest);
}

TEST(MemoryBench, ReportsEveryPassAndItsBestAndMedian) {
  MemoryBenchOptions o;
  o.bytes = 16 << 20;
  o.threads = 2;
  o.repeats = 3;
  const auto r = run_memory_bench(o);
  ASSERT_EQ(r.read_gbs.size(), 3u);
  for (double g : r.read_gbs) EXPECT_GT(g, 0.0);
  EXPECT_GE(r.best_gbs, r.median_gbs);
  const std::string json = format_memory_bench_json(r);
  EXPECT_NE(json.find("\"bytes\": 16777216"), std::string::npos) << json;
  EXPECT_NE(json.find("\"median_gbs\": "), std::string::npos) << json;
}

TEST(MemoryBench, BadOptionsAreNamed) {
  const auto expect_named = [](MemoryBenchOptions o, const std::string& name) {
    try {
      run_memory_bench(o);
      ADD_FAILURE() << name << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  MemoryBenchOptions small;
  small.bytes = 4096;
  expect_named(small, "--bytes = 4096");
  MemoryBenchOptions threads;
  threads.threads = 0;
  expect_named(threads, "--threads = 0");
  MemoryBenchOptions repeats;
  repeats.repeats = 0;
  expect_named(repeats, "--repeats = 0");
}

}  // namespace
}  // namespace zoff::optim::memory_bench_test
