// `zoff bench <what>`: benchmarks against baselines measured in the same run: `optim`, `io`,
// `comm`.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "bench_comm.h"
#include "bench_io.h"
#include "bench_memory.h"
#include "command.h"
#include "zoff/core/error.h"
#include "zoff/engine/tiered_optimizer_bench.h"
#include "zoff/optim/optimizer_bench.h"

namespace zoff::cli {
namespace {

struct BenchOptimFlags {
  int64_t params = 50'000'000;
  int threads = 2;
  int steps = 5;
  int repeats = 5;
  bool json = false;
  std::string tier = "ram";  // ram: kernels vs LibTorch; nvme: the step streamed from disk
  std::string dir = "/var/tmp";
  int64_t sub_group_size = 10000000;
  int64_t buffer_count = 0;
};

// --tier nvme: the sub-group step from disk against the same step in RAM and the disk bound.
void run_bench_optim_nvme(const BenchOptimFlags& f) {
  engine::TieredBenchOptions o;  // --steps and --repeats as given: 5 x 5 by default
  o.params = static_cast<size_t>(f.params);
  o.threads = f.threads;
  o.steps = f.steps;
  o.repeats = f.repeats;
  o.dir = f.dir;
  o.sub_group_elems = f.sub_group_size;
  o.buffer_count = f.buffer_count;
  engine::validate_tiered_bench_options(o);
  const auto result = engine::run_tiered_bench(o);
  if (f.json) {
    std::cout << engine::format_tiered_bench_json(result) << "\n";
    return;
  }
  const std::string command_line =
      "zoff bench optim --tier nvme --dir " + o.dir + " --params " + std::to_string(o.params) +
      " --sub-group-size " + std::to_string(o.sub_group_elems) + " --threads " +
      std::to_string(o.threads) + " --steps " + std::to_string(o.steps) + " --repeats " +
      std::to_string(o.repeats);
  std::cout << engine::format_tiered_bench_table(result, command_line);
}

void add_bench_optim(CLI::App& bench, int& exit_code) {
  auto flags = std::make_shared<BenchOptimFlags>();
  auto* cmd = bench.add_subcommand(
      "optim",
      "params/s of zoff's fused optimizers vs LibTorch's and streaming probes of their traffic");
  cmd->add_option("--params", flags->params, "parameters per span (fp32)")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "threads (zoff pool, probes, LibTorch)")
      ->capture_default_str();
  cmd->add_option("--steps", flags->steps, "optimizer steps per timed repetition")
      ->capture_default_str();
  cmd->add_option("--repeats", flags->repeats, "timed repetitions; the best counts")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print one JSON object instead of the table");
  cmd->add_option("--tier", flags->tier,
                  "ram: fused kernels vs LibTorch; nvme: the sub-group step from disk vs RAM "
                  "and the disk bound")
      ->capture_default_str();
  cmd->add_option("--dir", flags->dir, "--tier nvme: directory of the tier's files")
      ->capture_default_str();
  cmd->add_option("--sub-group-size", flags->sub_group_size,
                  "--tier nvme: elements per sub-group (zero_optimization.sub_group_size)")
      ->capture_default_str();
  cmd->add_option("--buffer-count", flags->buffer_count,
                  "--tier nvme: fp32 host buffers of one sub-group each (0: auto)")
      ->capture_default_str();
  cmd->callback([flags, &exit_code] {
    ZOFF_CHECK_ARG(flags->params > 0, "bench optim: --params = ", flags->params, ": must be > 0");
    ZOFF_CHECK_ARG(flags->tier == "ram" || flags->tier == "nvme", "bench optim: --tier = '",
                   flags->tier, "': must be ram or nvme");
    if (flags->tier == "nvme") {
      run_bench_optim_nvme(*flags);
      exit_code = 0;
      return;
    }
    optim::OptimizerBenchOptions options;
    options.params = static_cast<size_t>(flags->params);
    options.threads = flags->threads;
    options.steps = flags->steps;
    options.repeats = flags->repeats;
    optim::validate_bench_options(options);
    const auto result = optim::run_optimizer_bench(options);
    if (flags->json) {
      std::cout << optim::format_bench_json(result) << "\n";
    } else {
      const std::string command_line =
          "zoff bench optim --params " + std::to_string(options.params) + " --threads " +
          std::to_string(options.threads) + " --steps " + std::to_string(options.steps) +
          " --repeats " + std::to_string(options.repeats);
      std::cout << optim::format_bench_table(result, command_line);
    }
    exit_code = 0;
  });
}

void add_bench(CLI::App& root, int& exit_code) {
  auto* bench = root.add_subcommand("bench", "measure zoff's kernels against baselines");
  bench->require_subcommand(1);
  add_bench_optim(*bench, exit_code);
  add_bench_io(*bench, exit_code);      // cmd_bench_io.cpp
  add_bench_comm(*bench, exit_code);    // cmd_bench_comm.cpp
  add_bench_memory(*bench, exit_code);  // cmd_bench_memory.cpp
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(bench, zoff::cli::add_bench);
