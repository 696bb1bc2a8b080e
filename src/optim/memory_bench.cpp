// `zoff bench memory`: passes of the read probe (kernels.h) over one buffer by a thread pool.
#include "zoff/optim/memory_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/core/round_up.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/thread_pool.h"

namespace zoff::optim {
namespace {

constexpr size_t kMinBytes = size_t{1} << 20;

struct Unmap {
  size_t bytes;
  void operator()(uint8_t* p) const { unmap_huge_aligned(p, bytes); }
};

// The pool's slices of [0, bytes), in bytes: the fused optimizers' split on cache lines
// (the buffer is 2 MiB-aligned, its size a multiple of 2 MiB, so floats fit it exactly).
std::vector<size_t> slice_bounds(size_t bytes, int threads) {
  auto bounds = split_on_cache_lines(bytes / sizeof(float), threads, 0, 1);
  for (auto& b : bounds) b *= sizeof(float);
  return bounds;
}

double one_pass_gbs(ThreadPool& pool, const uint8_t* data, const std::vector<size_t>& bounds) {
  std::atomic<uint64_t> sink{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool.run([&](int k) {
    const size_t b = bounds[static_cast<size_t>(k)], e = bounds[static_cast<size_t>(k) + 1];
    sink.fetch_xor(read_probe(data + b, e - b), std::memory_order_relaxed);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(bounds.back()) / s / 1e9;
}

}  // namespace

void validate_memory_bench_options(const MemoryBenchOptions& o) {
  ZOFF_CHECK_ARG(o.bytes >= kMinBytes, "bench memory: --bytes = ", o.bytes,
                 ": must be >= 1 MiB (1048576)");
  ZOFF_CHECK_ARG(o.threads >= 1 && o.threads <= ThreadPool::kMaxThreads,
                 "bench memory: --threads = ", o.threads, ": must be in [1, ",
                 ThreadPool::kMaxThreads, "]");
  ZOFF_CHECK_ARG(o.repeats >= 1, "bench memory: --repeats = ", o.repeats, ": must be >= 1");
}

MemoryBenchResult run_memory_bench(const MemoryBenchOptions& o) {
  validate_memory_bench_options(o);
  // On huge pages where the kernel gives them (core/huge_pages.h), as generation's weights
  // are: the bound, not the cost of 4 KiB pages' TLB misses and prefetch stops.
  const size_t bytes = round_up(o.bytes, kHugePageBytes);
  const std::unique_ptr<uint8_t, Unmap> data(static_cast<uint8_t*>(map_huge_aligned(bytes)),
                                             Unmap{bytes});
  std::memset(data.get(), 0x5A, bytes);  // real pages, not the shared zero page
  ThreadPool pool(o.threads);
  const auto bounds = slice_bounds(bytes, o.threads);
  one_pass_gbs(pool, data.get(), bounds);  // warm-up: the workers started, TLBs filled
  MemoryBenchResult r;
  r.options = o;
  r.options.bytes = bytes;
  for (int i = 0; i < o.repeats; ++i) r.read_gbs.push_back(one_pass_gbs(pool, data.get(), bounds));
  std::vector<double> sorted = r.read_gbs;
  std::sort(sorted.begin(), sorted.end());
  r.best_gbs = sorted.back();
  r.median_gbs = sorted[sorted.size() / 2];
  return r;
}

std::string format_memory_bench_table(const MemoryBenchResult& r, const std::string& command_line) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "# %s\nread bandwidth, %zu bytes by %d threads, %d passes: best %.1f GB/s, "
                "median %.1f GB/s\n",
                command_line.c_str(), r.options.bytes, r.options.threads, r.options.repeats,
                r.best_gbs, r.median_gbs);
  return buf;
}

std::string format_memory_bench_json(const MemoryBenchResult& r) {
  std::string passes = "[";
  for (size_t i = 0; i < r.read_gbs.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", r.read_gbs[i]);
    passes += buf;
  }
  char tail[128];
  std::snprintf(tail, sizeof tail, "], \"best_gbs\": %.3f, \"median_gbs\": %.3f}", r.best_gbs,
                r.median_gbs);
  return "{\"bytes\": " + std::to_string(r.options.bytes) +
         ", \"threads\": " + std::to_string(r.options.threads) + ", \"read_gbs\": " + passes + tail;
}

}  // namespace zoff::optim
