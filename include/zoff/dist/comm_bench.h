// `zoff bench comm`: the engine's collectives over Gloo and over shared memory, against a memcpy
// of the same bytes, measured in one job.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "zoff/dist/world.h"

namespace zoff::dist {

struct CommBenchOptions {
  // Elements per rank: 7.2M is a 2-rank shard of the gpt small preset (14.4M parameters).
  int64_t numel = 7'200'000;
  int repeats = 10;  // timed calls of each collective per transport, alternating; median counts
  std::chrono::milliseconds timeout{60'000};
};

// Throws zoff::UsageError naming the flag (--numel, --repeats).
void validate_comm_bench_options(const CommBenchOptions& options);

// Milliseconds per call (median of repeats, rank 0's clock) of:
//   all_gather: numel bf16 per rank into size * numel (the parameter all-gather of stages 1-2);
//   reduce_scatter: size * numel bf16 in, numel fp32 out (the gradient reduce-scatter).
// memcpy_ms is one thread copying the bytes the all-gather's output holds (size * numel bf16):
// the floor for moving them once through memory.
struct CommBenchRow {
  std::string op;
  double gloo_ms = 0, shm_ms = 0, memcpy_ms = 0;
  int64_t bytes_per_rank = 0;  // what each rank contributes
};

struct CommBenchResult {
  CommBenchOptions options;
  int world_size = 0;
  std::vector<CommBenchRow> rows;
};

// Collective over the job in `world` (every rank calls it; world_size >= 2, one host): joins
// with Gloo, then maps a ShmComm over it, and times both on the same tensors.
CommBenchResult run_comm_bench(const WorldInfo& world, const CommBenchOptions& options);

std::string format_comm_bench_table(const CommBenchResult& result, const std::string& command_line);
std::string format_comm_bench_json(const CommBenchResult& result);

}  // namespace zoff::dist
