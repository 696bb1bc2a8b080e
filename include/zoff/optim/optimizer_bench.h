// `zoff bench optim`: params/s of the fused kernels, LibTorch's optimizers and a streaming probe.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace zoff::optim {

struct OptimizerBenchOptions {
  size_t params = 50'000'000;  // elements per span (fp32: 4 bytes each, 5+ spans live at once)
  int threads = 2;             // zoff pool threads, probe threads and torch::set_num_threads
  int steps = 5;               // optimizer steps per timed repetition
  int repeats = 5;             // timed repetitions (round robin) after a warm-up; best counts
};

// Throws zoff::UsageError naming the flag (--params, --threads, --steps, --repeats).
void validate_bench_options(const OptimizerBenchOptions& options);

// Parameters per second, by kernel name:
//   zoff:  adamw, adamw_bf16_out, adam, sgd (momentum 0.9), adagrad  (fused backend);
//          adamw_bf16_states, adamw_int8_states (AdamW with optimizer.state_dtype bf16 /
//          int8, bf16 copy-out like adamw_bf16_out)
//   torch: adamw, adam, sgd, adagrad  (torch::optim on the same spans)
//   probe: adam_fp32 (28 B/param: read p g m v, write p m v), adam_bf16_out (+ 2 B written),
//          split like the fused kernels and run by zoff's pool; adam_bf16_states (22 B) and
//          adam_int8_states (18 B), the compressed kernels' traffic with the copy-out
//          (stream_probe_states), run likewise; adam_fp32_omp, the adam_fp32
//          traffic run by OpenMP's threads over 16-float lines (openmp_probe.h)
struct OptimizerBenchResult {
  OptimizerBenchOptions options;
  std::string simd_target;  // Highway target the fused kernels ran with
  std::map<std::string, double> zoff, torch, probe;
  // adamw and adam measured each by itself, as the OpenMP probe is: in the round robin of
  // zoff, every kernel's first step of a repetition finds its data evicted by the others'
  // (at 1M parameters the spans fit in L3 and that first step costs a fifth of the rate).
  std::map<std::string, double> alone;
};

// Runs every measurement once, in one process, on the same spans.
OptimizerBenchResult run_optimizer_bench(const OptimizerBenchOptions& options);

// A table with ratios zoff/torch and zoff/probe, headed by `command_line`.
std::string format_bench_table(const OptimizerBenchResult& result, const std::string& command_line);
// Exactly one JSON object: {"zoff": {...}, "torch": {...}, "probe": {...}, "alone": {...}} in
// params/s, and "bytes_per_param": {...} the bytes each zoff kernel moves per parameter (the
// GB/s basis).
std::string format_bench_json(const OptimizerBenchResult& result);

}  // namespace zoff::optim
