// `zoff launch`: starts the local ranks of a job, labels their output, and stops them all when one
// fails.
#pragma once

#include <string>
#include <vector>

namespace zoff::dist {

// What `zoff launch -n N [--nnodes M --node-rank R --master-addr A --master-port P] -- CMD...`
// asked for. One launcher runs per node; it starts nproc_per_node ranks of the job.
struct LaunchOptions {
  int nproc_per_node = 1;  // -n: ranks started on this node
  int nnodes = 1;          // nodes in the job, one launcher each
  int node_rank = 0;       // this node, in [0, nnodes)
  // Host of rank 0 (and of the rendezvous store). Empty: not given, which means 127.0.0.1 on
  // one node and is refused with several (no node may guess another's address).
  std::string master_addr;
  int master_port = 0;               // 0: pick free ports P, P+1 (one node)
  int threads_per_rank = 0;          // 0: max(1, available cores / nproc_per_node)
  double timeout_seconds = 0;        // whole job; 0: no limit
  double grace_seconds = 5;          // SIGTERM -> SIGKILL delay when stopping ranks
  std::vector<std::string> command;  // program and its arguments, run for every rank

  // Throws zoff::UsageError naming the first bad value (n < 1, node_rank >= nnodes, a port
  // out of [0, 65535], port 0 or no master address with several nodes, an empty command, a
  // negative time).
  void validate() const;
  // master_addr, or 127.0.0.1 when it was not given (one node).
  std::string master_address() const { return master_addr.empty() ? "127.0.0.1" : master_addr; }
};

// The environment of one local rank: `base` (NAME=value entries) without any variable set
// below, plus
//   RANK = node_rank * nproc_per_node + local_rank,  WORLD_SIZE = nnodes * nproc_per_node,
//   LOCAL_RANK, LOCAL_WORLD_SIZE = nproc_per_node, GROUP_RANK = node_rank,
//   MASTER_ADDR, MASTER_PORT = master_port,
//   OMP_NUM_THREADS = ZOFF_NUM_THREADS = threads.
// The ranks of a node share its cores: each gets `threads` = max(1, cores / nproc_per_node)
// unless --threads-per-rank says otherwise, replacing any inherited value. LibTorch does not
// read ZOFF_NUM_THREADS by itself: the training code calls set_torch_threads_from_env().
std::vector<std::string> rank_environment(const LaunchOptions& options, int local_rank,
                                          int master_port, int threads,
                                          const std::vector<std::string>& base);

// Cores this process may run on (its CPU affinity mask), at least 1.
int available_cores();

// Reads ZOFF_NUM_THREADS (set by `zoff launch`) and, when set, calls torch::set_num_threads
// with it. Returns the count applied, or 0 when the variable is unset. A value that is not a
// positive integer throws zoff::UsageError naming it.
int set_torch_threads_from_env();

// Finds `program` the way execvp would (a name with a '/' is taken as a path, else each PATH
// entry is tried) and returns the path of an executable regular file. Throws
// zoff::UsageError "command not found: ..." otherwise.
std::string resolve_command(const std::string& program);

// Runs the job on this node and returns the launcher's exit code:
//   0    every rank exited 0;
//   1    a rank exited non-zero or was killed by a signal: the others were sent SIGTERM (and
//        SIGCONT, so that a stopped rank acts on it), then SIGKILL after grace_seconds, and one
//        line on stderr names the rank, e.g. "zoff launch: rank 1 was killed by signal 9 (SIGKILL);
//        stopped the other ranks";
//   124  the job ran past timeout_seconds (stopped the same way);
//   128 + s  the launcher got signal s (SIGINT, SIGTERM), forwarded it to the ranks and
//        stopped them.
// Every rank runs in its own process group (so stopping it reaches its children), is killed
// when the launcher dies (PR_SET_PDEATHSIG: a SIGKILLed launcher leaves no rank behind; a
// rank's own children are not covered, so a wrapper script should exec its program), with
// stdin from /dev/null; each line of its stdout and stderr is copied to the launcher's stdout and
// stderr prefixed "[rank R] " (a last line without '\n' is completed at exit).
// Bad options or a command that cannot be found throw zoff::UsageError before anything runs.
int launch(const LaunchOptions& options);

}  // namespace zoff::dist
