// `zoff launch`: parses the flags and hands them to zoff::dist::launch.
#include "command.h"
#include "zoff/dist/launcher.h"

namespace {

void add_launch(CLI::App& root, int& exit_code) {
  auto options = std::make_shared<zoff::dist::LaunchOptions>();
  CLI::App* sub = root.add_subcommand(
      "launch",
      "Run COMMAND as N local ranks of a data-parallel job (torchrun-style RANK, WORLD_SIZE, "
      "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ZOFF_NUM_THREADS). Usage: zoff "
      "launch -n N [options] -- COMMAND [ARGS...]");
  sub->add_option("-n,--nproc-per-node", options->nproc_per_node, "ranks on this node")->required();
  sub->add_option("--nnodes", options->nnodes, "nodes in the job (one launcher per node)")
      ->capture_default_str();
  sub->add_option("--node-rank", options->node_rank, "this node's index in [0, nnodes)")
      ->capture_default_str();
  sub->add_option("--master-addr", options->master_addr,
                  "address of the node hosting rank 0 (default 127.0.0.1 on one node; required "
                  "with --nnodes > 1)");
  sub->add_option("--master-port", options->master_port,
                  "rendezvous port; 0 picks a free one (single node only)")
      ->capture_default_str();
  sub->add_option("--threads-per-rank", options->threads_per_rank,
                  "OMP_NUM_THREADS / ZOFF_NUM_THREADS per rank; 0: cores / n")
      ->capture_default_str();
  sub->add_option("--timeout", options->timeout_seconds,
                  "stop the job after this many seconds; 0: no limit")
      ->capture_default_str();
  sub->add_option("--grace", options->grace_seconds,
                  "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->capture_default_str();
  sub->add_option("command", options->command, "program and arguments, after --");
  sub->callback([options, &exit_code] { exit_code = zoff::dist::launch(*options); });
}

}  // namespace

ZOFF_REGISTER_COMMAND(launch, add_launch);
