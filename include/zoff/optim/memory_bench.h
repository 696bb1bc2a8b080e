// `zoff bench memory`: the machine's read bandwidth now (generation's bound: one read of the
// weights per token), beside the traffic of the optimizers' streaming probe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace zoff::optim {

struct MemoryBenchOptions {
  size_t bytes = size_t{1} << 30;  // read per pass (rounded up to 2 MiB); past the L3: DRAM
  int threads = 2;                 // threads reading disjoint, cache-line-aligned slices
  int repeats = 10;                // timed passes after one warm-up
};

// Throws zoff::UsageError naming the flag (--bytes, --threads, --repeats).
void validate_memory_bench_options(const MemoryBenchOptions& options);

struct MemoryBenchResult {
  MemoryBenchOptions options;
  std::vector<double> read_gbs;  // each timed pass, 1e9 bytes/s
  double best_gbs = 0;
  double median_gbs = 0;
};

// One buffer, written once (its pages are real), then read `repeats` times by the threads.
MemoryBenchResult run_memory_bench(const MemoryBenchOptions& options);

// A table headed by `command_line`, and one JSON object:
// {"bytes", "threads", "read_gbs": [...], "best_gbs", "median_gbs"}.
std::string format_memory_bench_table(const MemoryBenchResult& result,
                                      const std::string& command_line);
std::string format_memory_bench_json(const MemoryBenchResult& result);

}  // namespace zoff::optim
