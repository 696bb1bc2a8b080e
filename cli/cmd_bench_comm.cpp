// `zoff bench comm`, added under `zoff bench` by cmd_bench.cpp: run it under `zoff launch -n N`.
#include <iostream>
#include <memory>

#include "bench_comm.h"
#include "zoff/dist/comm_bench.h"
#include "zoff/dist/launcher.h"

namespace zoff::cli {

void add_bench_comm(CLI::App& bench, int& exit_code) {
  struct Flags {
    dist::CommBenchOptions bench;
    int64_t timeout_s = 60;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = bench.add_subcommand(
      "comm",
      "ms per all-gather and reduce-scatter over Gloo vs shared memory, beside memcpy (run under "
      "zoff launch -n 2)");
  cmd->add_option("--numel", flags->bench.numel, "bf16 elements per rank")->capture_default_str();
  cmd->add_option("--repeats", flags->bench.repeats, "timed calls per transport; median counts")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", flags->timeout_s, "seconds before a collective fails")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "print one JSON object (rank 0) instead of the table");
  cmd->callback([flags, &exit_code] {
    dist::validate_comm_bench_options(flags->bench);
    flags->bench.timeout = std::chrono::seconds(flags->timeout_s);
    dist::set_torch_threads_from_env();
    const auto world = dist::WorldInfo::from_env();
    const auto result = dist::run_comm_bench(world, flags->bench);
    if (world.rank == 0) {
      if (flags->json) {
        std::cout << dist::format_comm_bench_json(result) << "\n";
      } else {
        std::cout << dist::format_comm_bench_table(
            result, "zoff launch -n " + std::to_string(world.world_size) +
                        " -- zoff bench comm --numel " + std::to_string(flags->bench.numel) +
                        " --repeats " + std::to_string(flags->bench.repeats));
      }
    }
    exit_code = 0;
  });
}

}  // namespace zoff::cli
