// `zoff bench memory`, added under `zoff bench` by cmd_bench.cpp: the read bandwidth now.
#include <iostream>
#include <memory>

#include "bench_memory.h"
#include "zoff/optim/memory_bench.h"

namespace zoff::cli {

void add_bench_memory(CLI::App& bench, int& exit_code) {
  struct Flags {
    optim::MemoryBenchOptions bench;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = bench.add_subcommand(
      "memory", "GB/s of reading a buffer larger than the caches (generation's bound)");
  cmd->add_option("--bytes", flags->bench.bytes, "bytes of the buffer read per pass")
      ->capture_default_str();
  cmd->add_option("--threads", flags->bench.threads, "threads reading disjoint slices")
      ->capture_default_str();
  cmd->add_option("--repeats", flags->bench.repeats, "timed passes after a warm-up")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print one JSON object instead of the table");
  cmd->callback([flags, &exit_code] {
    const auto result = optim::run_memory_bench(flags->bench);
    if (flags->json) {
      std::cout << optim::format_memory_bench_json(result) << "\n";
    } else {
      const auto& o = flags->bench;
      std::cout << optim::format_memory_bench_table(
          result, "zoff bench memory --bytes " + std::to_string(o.bytes) + " --threads " +
                      std::to_string(o.threads) + " --repeats " + std::to_string(o.repeats));
    }
    exit_code = 0;
  });
}

}  // namespace zoff::cli
