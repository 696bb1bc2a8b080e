// plan_run: the engine's buffers by its own rules, plus activations, data and the runtime.
#include "zoff/estimate/run_plan.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "zoff/core/error.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/state_dtype.h"
#include "zoff/placement/state_bytes.h"
#include "zoff/placement/stream_window.h"

namespace zoff::estimate {
namespace {

constexpr size_t kTierAlignment = 4096;  // the nvme tier's O_DIRECT block (offload/tier.h)

struct Shape {
  placement::StateShape state;  // padded as the engine's layout pads (state_bytes.h)
  int64_t params = 0;           // trainable elements
  int64_t largest = 0;          // largest unit (stage 3) or parameter block, padded
  int64_t two_pieces = 0;       // the two largest units' pieces on one rank, elements
  int64_t units = 0;            // units (stage 3) or parameter blocks
  int64_t compute = 4;          // bytes per compute element
  int64_t world = 1;            // ranks
  size_t state_bytes = 4;       // stored bytes per state element
};

Shape shape_of(const placement::Placement& pl, const config::Config& c, int world,
               const PlanModel& m) {
  Shape s;
  s.world = world;
  s.compute = static_cast<int64_t>(placement::element_bytes(pl.precision));
  s.state_bytes = optim::stored_element_bytes(pl.states);
  s.state = placement::state_shape(m.unit_elems, world, pl.stage,
                                   optim::optimizer_state_count(c.optimizer));
  int64_t second = 0;
  for (int64_t u : m.unit_elems) {
    const int64_t padded = (u + world - 1) / world * world;  // model_layout: units padded
    s.params += u;
    ++s.units;
    second = std::max(second, std::min(s.largest, padded));
    s.largest = std::max(s.largest, padded);
  }
  s.two_pieces = (s.largest + second) / world;
  return s;
}

void add(std::vector<PlanItem>& items, const std::string& name, int64_t bytes,
         const std::string& how, PlanPhase phase = PlanPhase::kAlways) {
  if (bytes > 0) items.push_back({name, bytes, how, phase});
}

// Model states in host memory (the compute tier and the cpu offload tier are the same RAM
// on this machine), as the placement puts them: the engine's own rule (state_bytes.h).
void host_states(const placement::Placement& pl, const Shape& s, RunPlan& p) {
  const placement::StateBytes b = placement::state_bytes(pl, s.state);
  add(p.host, pl.stage < 3 ? "parameters" : "parameter pieces", b.memory_params,
      pl.stage < 3 ? "whole, compute dtype" : "this rank's pieces, compute dtype");
  add(p.host, pl.stage < 2 ? "gradients" : "gradient shard", b.memory_grads,
      pl.stage < 2 ? "whole, fp32" : "fp32");
  add(p.host, "fp32 master", b.memory_master,
      pl.split_master ? "split: 16-bit extensions, the bf16 parameters the other half"
                      : "the shard");
  add(p.host, pl.optimizer_on_disk() ? "int8 scales" : "optimizer states", b.memory_states,
      pl.optimizer_on_disk() ? "4 bytes per 2048 elements per state" : "the shard, as stored");
}

// Elements of the `count` largest of the shard's sub-groups (all `group` long but the last):
// what `count` buffers of a sub-group each touch when each is used for any of them. Pages of
// a buffer no sub-group reached are mapped but never resident.
int64_t largest_groups(int64_t shard, int64_t group, int64_t count) {
  const int64_t groups = (shard + group - 1) / group;
  if (count >= groups) return shard;
  return count * group;
}

// Elements in the largest bucket backward reduces at once (stage 3: a unit; stages 1-2:
// reduce_bucket_size, or a larger unit).
int64_t reduce_bucket(const config::Config& c, const Shape& s) {
  return c.zero.stage == 3 ? s.largest
                           : std::max(std::min(c.zero.reduce_bucket_size, s.params), s.largest);
}

// This rank's piece of that bucket: what the streamed-gradient window takes at once.
int64_t bucket_piece(const config::Config& c, const Shape& s) {
  return (reduce_bucket(c, s) + s.world - 1) / s.world;
}

// The disk step's staging: sub-group buffer sets, the gradient window or read-add-write
// window (tiered_optimizer.h); the int8 scales are counted with the states.
void step_buffers(const placement::Placement& pl, const config::Config& c, const Shape& s,
                  RunPlan& p) {
  if (!pl.optimizer_on_disk()) return;
  const auto& oo = c.zero.offload_optimizer;
  const int64_t shard = s.state.shard;
  const int64_t group = optim::round_sub_group(c.zero.sub_group_size, kTierAlignment,
                                               static_cast<size_t>(shard), s.state_bytes);
  const int64_t groups = (shard + group - 1) / group;
  const int64_t per_set = 1 + s.state.states;
  const int64_t slots = oo.buffer_count == 0 ? 3 : oo.buffer_count / per_set;
  // A set: the fp32 master (split: its extensions, joined and split again chunk by chunk),
  // each state as stored, stage 3's compute-dtype copy.
  const int64_t element_bytes = (pl.split_master ? 2 : 4) +
                                s.state.states * static_cast<int64_t>(s.state_bytes) +
                                (pl.params_on_disk() ? s.compute : 0);
  add(p.host, "step buffers", largest_groups(shard, group, slots) * element_bytes,
      std::to_string(std::min(slots, groups)) + " sets of " + std::to_string(group) +
          "-element sub-groups, as far as sub-groups fill them");
  if (pl.split_master) {
    add(p.host, "range-copy buffer", std::min(shard, group) * 4,
        "one sub-group of fp32: checkpoints read and write the master through it");
  }
  if (pl.grads == placement::GradStore::kStreamed) {
    // Allocated as sub-groups fill, so never more than the shard has sub-groups. Sub-groups
    // no gradient reached read a zero buffer whose pages are never written: the kernel's
    // zero page, not resident.
    const int64_t cap = oo.stream_buffers > 0
                            ? oo.stream_buffers
                            : placement::auto_stream_buffers(slots, group, bucket_piece(c, s));
    const int64_t buffers = std::min(cap, groups);
    add(p.host, "gradient window", largest_groups(shard, group, buffers) * 4,
        std::to_string(buffers) + " sub-groups filled by backward, freed by the step",
        PlanPhase::kBackwardEnd);
  } else if (pl.grads == placement::GradStore::kDisk) {
    add(p.host, "gradient buffers",
        largest_groups(shard, group, slots) * 4 + group * 4 + 2 * int64_t{kTierAlignment},
        "one per set + the read-add-write window");
  }
}

// Stage 3: units whole at once, read-ahead pieces, a unit's gradients on their way out.
void unit_buffers(const placement::Placement& pl, const config::Config& c, const Shape& s,
                  RunPlan& p) {
  const int64_t unit = s.largest;
  if (pl.stage == 3) {
    add(p.host, "whole units", 2 * unit * s.compute,
        "the largest unit in use and the next gathered or prefetched");
    if (pl.params_on_disk()) {
      // The pieces' read buffers (the one in use included) stay within max_in_cpu, or the
      // two largest pieces when that is more (tier_unit_pieces.cpp: the read-ahead's budget).
      const int64_t ahead = std::max(c.zero.offload_param.max_in_cpu, s.two_pieces);
      add(p.host, "read-ahead pieces", std::min(ahead, s.state.shard) * s.compute,
          "offload_param.max_in_cpu, at least the two largest pieces, compute dtype");
    }
  }
  // Autograd's gradient of a unit and the bucket it is staged in, both in the compute dtype
  // (the reduce-scatter sends gradients as they are and sums them in fp32).
  // Stage 3 reduces unit by unit; stage 2 in buckets of reduce_bucket_size.
  const int64_t bucket = reduce_bucket(c, s);
  add(p.host, "unit gradients", unit * s.compute, "autograd's, before staging");
  if (c.zero.stage >= 2) {
    // With overlap_comm, a bucket fills while the previous one's collective runs (two
    // buffers); without, every bucket is staged before the first collective starts.
    const int64_t buckets = c.zero.stage == 3 ? s.units : (s.params + bucket - 1) / bucket;
    const int64_t staged = c.zero.overlap_comm ? std::min<int64_t>(2, buckets) : buckets;
    add(p.host, "reduce staging", staged * bucket * s.compute,
        std::to_string(staged) + (staged == 1 ? " bucket" : " buckets") + ", compute dtype");
  }
}

void disk_files(const placement::Placement& pl, const Shape& s, RunPlan& p) {
  const placement::StateBytes b = placement::state_bytes(pl, s.state);
  add(p.disk, "fp32 master", b.disk_master,
      pl.split_master ? "split: 16-bit extensions, the bf16 parameters the other half" : "");
  add(p.disk, "optimizer states", b.disk_states, optim::state_dtype_name(pl.states));
  add(p.disk, "gradient shard", b.disk_grads, "fp32");
  add(p.disk, "parameters", b.disk_params, "compute dtype");
}

std::string gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

placement::Placement plan_placement(const config::Config& config, int world, const PlanModel& model,
                                    int64_t available_bytes) {
  ZOFF_CHECK_ARG(world >= 1, "plan: world size ", world, ": must be >= 1");
  ZOFF_CHECK_ARG(!model.unit_elems.empty(), "plan: the model has no trainable parameters");
  placement::PlacementContext ctx;
  ctx.world = world;
  ctx.shard_elems = placement::state_shape(model.unit_elems, world, config.zero.stage, 0).shard;
  ctx.available_bytes = available_bytes;
  return placement::resolve(config, ctx);
}

RunPlan plan_run(const config::Config& config, int world, const PlanModel& model,
                 int64_t available_bytes) {
  const placement::Placement pl = plan_placement(config, world, model, available_bytes);
  const Shape s = shape_of(pl, config, world, model);
  RunPlan p;
  p.world = world;
  p.params = s.params;
  p.shard_elems = s.state.shard;
  add(p.host, "runtime", kRuntimeBytes, "LibTorch, Gloo, zoff and threads (measured)");
  add(p.host, "data", model.data_bytes, "the training text/images in memory");
  host_states(pl, s, p);
  step_buffers(pl, config, s, p);
  unit_buffers(pl, config, s, p);
  add(p.host, "activations", model.activation_bytes, "kept by autograd for one micro-batch",
      PlanPhase::kBackwardStart);
  add(p.host, "late activations", model.late_activation_bytes,
      "still kept as backward ends (checkpointed block inputs)", PlanPhase::kBackwardEnd);
  disk_files(pl, s, p);
  for (const auto& i : p.host) {
    (i.phase == PlanPhase::kAlways          ? p.always_bytes
     : i.phase == PlanPhase::kBackwardStart ? p.start_bytes
                                            : p.end_bytes) += i.bytes;
  }
  // Both peaks at once: backward fills the gradient window while the activations of the
  // blocks it has not reached yet are still held (a backward faster than the disk step
  // waits for a full window with most of them), and in a run with room glibc's heap keeps
  // what backward frees for the next step (placement.rss_first_heap) under the window,
  // which is mapped afresh.
  p.host_bytes = p.always_bytes + p.start_bytes + p.end_bytes;
  for (const auto& i : p.disk) p.disk_bytes += i.bytes;
  return p;
}

std::string to_table(const RunPlan& p) {
  std::ostringstream os;
  os << "plan for one rank of " << p.world << ": " << p.params << " parameters, shard of "
     << p.shard_elems << " elements\n";
  const std::pair<PlanPhase, const char*> phases[] = {
      {PlanPhase::kAlways, "host memory all along"},
      {PlanPhase::kBackwardStart, "+ as backward starts"},
      {PlanPhase::kBackwardEnd, "+ as backward ends"}};
  for (const auto& [phase, title] : phases) {
    os << title << "\n";
    for (const auto& i : p.host) {
      if (i.phase != phase) continue;
      char line[200];
      std::snprintf(line, sizeof line, "  %-20s %12s  %s\n", i.name.c_str(), gb(i.bytes).c_str(),
                    i.how.c_str());
      os << line;
    }
  }
  os << "peak host memory (RSS): " << gb(p.always_bytes) << " + " << gb(p.start_bytes) << " + "
     << gb(p.end_bytes) << " = " << gb(p.host_bytes) << "\n";
  os << "disk (nvme tier files of this rank)\n";
  for (const auto& i : p.disk) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-20s %12s  %s\n", i.name.c_str(), gb(i.bytes).c_str(),
                  i.how.c_str());
    os << line;
  }
  os << "  total                " << gb(p.disk_bytes) << " (x " << p.world
     << " ranks = " << gb(p.disk_bytes * p.world) << ")\n";
  return os.str();
}

std::string to_json(const RunPlan& p) {
  nlohmann::ordered_json j;
  j["world"] = p.world;
  j["params"] = p.params;
  j["shard_elems"] = p.shard_elems;
  auto items = [](const std::vector<PlanItem>& v) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (const auto& i : v) o[i.name] = i.bytes;
    return o;
  };
  j["host"] = items(p.host);
  j["always_bytes"] = p.always_bytes;
  j["backward_start_bytes"] = p.start_bytes;
  j["backward_end_bytes"] = p.end_bytes;
  j["host_bytes"] = p.host_bytes;
  j["disk"] = items(p.disk);
  j["disk_bytes"] = p.disk_bytes;
  return j.dump();
}

}  // namespace zoff::estimate
