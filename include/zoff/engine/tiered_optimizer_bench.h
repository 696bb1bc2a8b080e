// `zoff bench optim --tier nvme`: params/s of the sub-group step streamed from disk, against
// the same step in RAM and against the disk bound, all measured in one run.
#pragma once

#include <cstddef>
#include <string>

#include "zoff/offload/aio_options.h"

namespace zoff::engine {

struct TieredBenchOptions {
  size_t params = 50'000'000;          // fp32 elements of the master (and of m, v)
  int threads = 2;                     // optimizer kernel threads
  int steps = 3;                       // optimizer steps per timed repetition
  int repeats = 3;                     // timed repetitions, round robin; the best counts
  std::string dir = "/var/tmp";        // nvme_path of the tier's files
  int64_t sub_group_elems = 10000000;  // zero_optimization.sub_group_size
  int64_t buffer_count = 0;            // offload_optimizer.buffer_count (0: auto)
  offload::AioOptions aio;
};

// Throws zoff::UsageError naming the flag (--params, --threads, --steps, --repeats,
// --sub-group-size, --buffer-count) or the aio value.
void validate_tiered_bench_options(const TieredBenchOptions& options);

// AdamW with a bf16 copy-out (the bf16 training step), over `params` elements.
struct TieredBenchResult {
  TieredBenchOptions options;
  std::string io;                      // the tier's I/O path ("io_uring, O_DIRECT")
  double ram_params_per_s = 0;         // the fused step over spans in RAM
  double nvme_params_per_s = 0;        // the TieredOptimizer step, master and states on disk
  double read_gbps = 0;                // the tier's sequential read, sub-group transfers
  double write_gbps = 0;               // the tier's sequential write, sub-group transfers
  double bytes_per_param = 0;          // moved each way per step: master + states, fp32
  double disk_bound_params_per_s = 0;  // 1 / (bytes/read_bw + bytes/write_bw)
};

// Builds both optimizers over the same values, times them round robin, then measures the
// disk's read and write bandwidth on a file of the states' size with the tier's own I/O
// path, in the same directory. Needs about 3 x 4 x params bytes free under `dir`.
TieredBenchResult run_tiered_bench(const TieredBenchOptions& options);

// A table with the ratios nvme / ram and nvme / disk bound, headed by `command_line`.
std::string format_tiered_bench_table(const TieredBenchResult& result,
                                      const std::string& command_line);
// Exactly one JSON object with every figure of the result.
std::string format_tiered_bench_json(const TieredBenchResult& result);

}  // namespace zoff::engine
