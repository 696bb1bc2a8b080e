// The planner that chooses (`zoff estimate --ram R --disk D`): candidate configurations of
// one training run, each planned by plan_run, which of them fit a machine's memory and disk,
// and the cheapest that does.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/estimate/run_plan.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::estimate {

// What the machine offers the run (all its ranks).
struct MachineBudget {
  int64_t ram_bytes = 0;
  int64_t disk_bytes = 0;
};

// Where the candidate keeps the model states (the rest of the base config is kept).
struct CandidateSpec {
  int stage = 2;
  bool optimizer_on_disk = false;  // offload_optimizer nvme (else cpu)
  bool params_on_disk = false;     // stage 3: offload_param nvme
  optim::StateDtype states = optim::StateDtype::kFp32;
  bool activation_checkpointing = false;
  // The optimizer on disk with bf16: the split master (offload_optimizer.split_master), or
  // the 4-byte master.
  bool split_master = false;
  // The fp32 gradient shard: "cpu" (in memory), or with the optimizer on disk at stages 2-3
  // "stream" (kept nowhere) or "nvme" (offload_optimizer.gradients).
  std::string gradients = "cpu";
};

struct Candidate {
  CandidateSpec spec;
  std::string name;  // "stage 3, optimizer nvme, parameters nvme, int8 states, checkpointing"
  // The step time expected relative to stage 2 with everything in memory (plan_choice.cpp
  // says where each factor was measured): the order candidates are preferred in.
  double relative_step = 1.0;
  config::Config config;   // ready to run
  RunPlan plan;            // one rank
  int64_t ram_bytes = 0;   // every rank of the host: plan.host_bytes x ranks
  int64_t disk_bytes = 0;  // plan.disk_bytes x ranks
  bool fits = false;       // fits_budget(ram_bytes, disk_bytes, budget)
};

// The margins a candidate keeps below the budget: the planner's accuracy against measured
// runs (its RSS within 10%, measured 0.93-1.04 of the peak; disk bytes within 2%), so that a
// candidate that "fits" fits when it runs.
inline constexpr double kRamMargin = 0.10;
inline constexpr double kDiskMargin = 0.02;

// Whether predicted `ram` and `disk` bytes, with the margins, are within `budget`.
bool fits_budget(int64_t ram, int64_t disk, const MachineBudget& budget);

// Candidates for `base` (its precision, batch, optimizer and schedule kept; the ZeRO stage,
// offload devices, optimizer.state_dtype and activation checkpointing chosen; those the base
// cannot run left out: compressed states for other optimizers than Adam/AdamW, the disk
// or stage 3 with a delayed parameter update) on `world` ranks of one host, tier files under
// `nvme_path`. RAM is each rank's peak times `world`: one parameter copy per host (stages
// 1-2) is counted in every rank, so several ranks' RAM is over-, never under-counted;
// `model_for(checkpointing)` gives the model's plan inputs with or without activation
// checkpointing. Sorted cheapest first. Throws zoff::UsageError for a budget <= 0 or an empty
// nvme_path.
std::vector<Candidate> plan_candidates(const config::Config& base, int world,
                                       const std::string& nvme_path,
                                       const std::function<PlanModel(bool)>& model_for,
                                       const MachineBudget& budget);

// The first (cheapest) candidate that fits, or nullptr.
const Candidate* cheapest_fitting(const std::vector<Candidate>& candidates);

// A table: each candidate, its predicted RAM and disk for all ranks, whether it fits, and
// which one is chosen.
std::string candidates_table(const std::vector<Candidate>& candidates, const MachineBudget& budget);

// "24GiB", "70GB", "1.5TiB", "512MiB", "1e9" (bytes) as bytes; zoff::UsageError naming
// `flag` and the text otherwise.
int64_t parse_byte_size(const std::string& flag, const std::string& text);

}  // namespace zoff::estimate
