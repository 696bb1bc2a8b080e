// The planner (`zoff estimate --plan`): peak host memory (RSS) and disk bytes of one rank of
// a training run, predicted from its config and the model's shape before anything is built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/placement/placement.h"

namespace zoff::estimate {

// What the planner needs to know of the model.
struct PlanModel {
  // Trainable elements of each stage-3 unit (the computations run through zoff::with_unit),
  // in any order; at stages 0-2 only their sum matters.
  std::vector<int64_t> unit_elems;
  // Peak bytes autograd keeps for one micro-batch, forward to the end of backward (model
  // specific: models::gpt_activation_bytes for the gpt).
  int64_t activation_bytes = 0;
  // Bytes of the activations still kept when backward ends (the checkpointed block inputs
  // with activation checkpointing; about nothing without).
  int64_t late_activation_bytes = 0;
  // Bytes of the training data held in memory.
  int64_t data_bytes = 0;
};

// One line of the plan: what holds the bytes and how they were counted.
// When an item is in memory within a step: all along, or around one of the two peaks of
// backward, which overlap (the window fills while activations are still held): host memory
// is the sum of all three.
enum class PlanPhase {
  kAlways,
  kBackwardStart,  // the forward's activations, all still kept
  kBackwardEnd,    // gradients leaving for the step: the window of streamed sub-groups
};

struct PlanItem {
  std::string name;
  int64_t bytes = 0;
  std::string how;
  PlanPhase phase = PlanPhase::kAlways;
};

struct RunPlan {
  int world = 1;
  int64_t params = 0;          // trainable elements
  int64_t shard_elems = 0;     // this rank's optimizer elements (padded)
  std::vector<PlanItem> host;  // host memory within a step, by phase
  int64_t always_bytes = 0;    // the kAlways items
  int64_t start_bytes = 0;     // the kBackwardStart items
  int64_t end_bytes = 0;       // the kBackwardEnd items
  std::vector<PlanItem> disk;  // the tier files of one rank
  int64_t host_bytes = 0;      // always + start + end: the predicted peak RSS
  int64_t disk_bytes = 0;      // one rank; times world for the node
};

// Process memory of the runtime itself, with no model states: LibTorch, oneDNN, Gloo, the
// zoff binary and its threads: the part of RSS no formula gives. Measured on this machine
// (LibTorch 1.13.1, 2 threads): gpt tiny trained 3 steps at stage 3 with everything on
// disk peaks at 230 MB, of which the plan's own items are 48 MB.
inline constexpr int64_t kRuntimeBytes = 182000000;

// The plan for `config` (as zoff train would run it on `world` ranks) and `model`. The
// engine's own buffers are counted with its rules (sub-group rounding, unit padding, the
// gradient window, read-ahead caps); the rest is the model's activations, the data and
// kRuntimeBytes. Throws UsageError for an empty model or world < 1.
// `available_bytes`: the memory the run will find free (0 = unknown), which decides
// offload_optimizer.gradients = auto as the engine decides it (placement::resolve).
RunPlan plan_run(const config::Config& config, int world, const PlanModel& model,
                 int64_t available_bytes = 0);

// The placement plan_run counts with (the engine resolves the same from the same config).
placement::Placement plan_placement(const config::Config& config, int world, const PlanModel& model,
                                    int64_t available_bytes = 0);

std::string to_table(const RunPlan& plan);
std::string to_json(const RunPlan& plan);

}  // namespace zoff::estimate
