// resolve: the config's placement keys, their cross-key rules checked once, as one Placement.
#include "zoff/placement/placement.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "zoff/core/error.h"

namespace zoff::placement {
namespace {

Precision precision_of(const config::Config& c) {
  ZOFF_CHECK_ARG(!(c.bf16 && c.fp16.enabled), "bf16 and fp16 are both enabled");
  return c.bf16 ? Precision::kBf16 : c.fp16.enabled ? Precision::kFp16 : Precision::kFp32;
}

// "none" | "cpu" | "nvme" of an offload section, with its directories, as a store.
StorePlace store_of(const std::string& device, const std::vector<std::string>& paths,
                    const std::string& key) {
  if (device == "none") return {Store::kCompute, {}};
  if (device == "cpu") return {Store::kHost, {}};
  ZOFF_CHECK_ARG(device == "nvme", "zero_optimization.", key, ".device = ", device,
                 ": must be none, cpu or nvme");
  ZOFF_CHECK_ARG(!paths.empty(), "zero_optimization.", key,
                 ".device = nvme needs zero_optimization.", key, ".nvme_path");
  return {paths.size() == 1 ? Store::kNvme : Store::kNvmeStriped, paths};
}

void check_stage(const config::Config& c, const PlacementContext& ctx) {
  ZOFF_CHECK_ARG(c.gradient_accumulation_steps >= 1,
                 "gradient_accumulation_steps = ", c.gradient_accumulation_steps, ": must be >= 1");
  const int stage = c.zero.stage;
  ZOFF_CHECK_ARG(stage >= 0 && stage <= 3, "zero_optimization.stage = ", stage,
                 ": must be 0, 1, 2 or 3");
  ZOFF_CHECK_ARG(ctx.world >= 1, "placement: world size ", ctx.world, ": must be >= 1");
}

// The optimizer's and the parameters' stores, and what each allows.
void resolve_stores(const config::Config& c, const PlacementContext& ctx, Placement* p) {
  const auto& oo = c.zero.offload_optimizer;
  const auto& op = c.zero.offload_param;
  p->optimizer = store_of(oo.device, oo.nvme_paths, "offload_optimizer");
  ZOFF_CHECK_ARG(!p->offloaded() || p->stage >= 1,
                 "zero_optimization.offload_optimizer.device = ", oo.device,
                 ": needs zero_optimization.stage >= 1");
  ZOFF_CHECK_ARG(!(p->optimizer_on_disk() && ctx.torch_optimizer),
                 "--optimizer-backend torch cannot stream optimizer states from nvme (use fused)");
  // offload_param "cpu" is where stage 3's pieces are anyway on this machine's compute device.
  const StorePlace params = store_of(op.device, op.nvme_paths, "offload_param");
  ZOFF_CHECK_ARG(op.device == "none" || p->stage == 3,
                 "zero_optimization.offload_param.device = ", op.device,
                 ": needs zero_optimization.stage = 3");
  ZOFF_CHECK_ARG(!on_disk(params.store) || p->optimizer_on_disk(),
                 "zero_optimization.offload_param.device = nvme needs stage 3 and "
                 "offload_optimizer.device = nvme (the step writes the new parameter pieces "
                 "straight to disk)");
  p->params = on_disk(params.store) ? params : StorePlace{};
  ZOFF_CHECK_ARG(!(p->stage == 3 && oo.delayed_param_update),
                 "zero_optimization.offload_optimizer.delayed_param_update with stage 3 is not "
                 "supported yet (use stage 1 or 2)");
  ZOFF_CHECK_ARG(!oo.delayed_param_update || p->optimizer.store == Store::kHost,
                 "zero_optimization.offload_optimizer.delayed_param_update needs "
                 "offload_optimizer.device = cpu, not ",
                 oo.device);
  p->delayed_update = oo.delayed_param_update;
  p->overlap_step =
      p->optimizer_on_disk() && oo.overlap_step && c.gradient_clipping == 0.0 && !c.fp16.enabled;
  p->pin_memory = oo.pin_memory;
}

// A module on an accelerator: stages 1-3 with the optimizer offloaded (zoff's optimizer
// runs on the CPU; stage 3's pieces live in host memory or on disk).
void check_device(const Placement& p) {
  // Stage 0 cannot offload (the config refuses it), so this also refuses stage 0.
  ZOFF_CHECK_ARG(p.offloaded(), "engine: the module is on a GPU",
                 ": zero_optimization.offload_optimizer.device = none",
                 ": a GPU module needs cpu or nvme (zoff's optimizer runs on the CPU)");
}

// offload_optimizer.gradients: "nvme" and "stream" are checked; "auto" picks one of them
// when this rank's fp32 gradient shard would take more than half of the memory available
// (the rest is for the parameters, activations and the step's buffers).
GradStore resolve_grads(const config::Config& c, const PlacementContext& ctx, bool announce) {
  const std::string& where = c.zero.offload_optimizer.gradients;
  if (where == "cpu") return GradStore::kMemory;
  if (where == "nvme" || where == "stream") {
    ZOFF_CHECK_ARG(c.zero.offload_optimizer.device == "nvme",
                   "zero_optimization.offload_optimizer.gradients = ", where,
                   " needs zero_optimization.offload_optimizer.device = nvme");
    ZOFF_CHECK_ARG(c.zero.stage >= 2, "zero_optimization.offload_optimizer.gradients = ", where,
                   " needs stage 2 or 3 (stage 1 keeps the whole fp32 gradient in memory)");
    ZOFF_CHECK_ARG(!c.fp16.enabled, "zero_optimization.offload_optimizer.gradients = ", where,
                   " does not work with fp16 (its overflow check reads every gradient before "
                   "the step): use bf16");
  }
  if (where == "stream") {
    const std::string why = why_not_streamed(c);
    ZOFF_CHECK_ARG(why.empty(),
                   "zero_optimization.offload_optimizer.gradients = stream needs the "
                   "step overlapped with a single backward; not with ",
                   why);
    return GradStore::kStreamed;
  }
  if (where == "nvme") return GradStore::kDisk;
  ZOFF_CHECK_ARG(where == "auto", "zero_optimization.offload_optimizer.gradients = ", where,
                 ": must be auto, cpu, nvme or stream");
  if (c.zero.stage < 2 || c.fp16.enabled || c.zero.offload_optimizer.device != "nvme") {
    return GradStore::kMemory;
  }
  const int64_t shard_bytes = ctx.shard_elems * 4;
  if (ctx.available_bytes <= 0 || shard_bytes <= ctx.available_bytes / 2) return GradStore::kMemory;
  const GradStore place = why_not_streamed(c).empty() ? GradStore::kStreamed : GradStore::kDisk;
  if (announce) {
    std::cerr << "zoff: the fp32 gradient shard (" << shard_bytes
              << " bytes) exceeds half of the available memory (" << ctx.available_bytes
              << " bytes): offload_optimizer.gradients = auto chose "
              << (place == GradStore::kStreamed ? "stream" : "nvme") << "\n";
  }
  return place;
}

}  // namespace

size_t element_bytes(Precision precision) { return precision == Precision::kFp32 ? 4 : 2; }

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

std::string to_string(Store store) {
  switch (store) {
    case Store::kCompute:
      return "compute";
    case Store::kHost:
      return "host";
    case Store::kNvme:
      return "nvme";
    case Store::kNvmeStriped:
      return "nvme striped";
  }
  return "?";
}

bool on_disk(Store store) { return store == Store::kNvme || store == Store::kNvmeStriped; }

std::string to_string(GradStore grads) {
  switch (grads) {
    case GradStore::kMemory:
      return "memory";
    case GradStore::kDisk:
      return "disk";
    case GradStore::kStreamed:
      return "streamed";
  }
  return "?";
}

std::string Placement::describe() const {
  std::ostringstream os;
  auto place = [](const StorePlace& s) {
    std::string text = to_string(s.store);
    if (s.store == Store::kNvmeStriped)
      text += " over " + std::to_string(s.paths.size()) + " paths";
    return text;
  };
  os << "stage " << stage << ", " << to_string(precision) << "; master"
     << (split_master ? " (split)" : "") << " and states (" << optim::state_dtype_name(states)
     << "): " << place(optimizer) << "; gradients: " << to_string(grads) << "; parameters: ";
  os << (stage == 3 ? place(params) + " (pieces)" : std::string("compute (whole)"));
  return os.str();
}

bool master_is_params(Precision precision, int stage, Store optimizer, bool compute_on_device) {
  if (precision != Precision::kFp32) return false;
  if (stage == 0) return optimizer == Store::kCompute;
  return stage == 3 && !on_disk(optimizer) && !compute_on_device;
}

std::string why_not_streamed(const config::Config& c) {
  if (!c.zero.offload_optimizer.overlap_step) return "offload_optimizer.overlap_step = false";
  if (c.gradient_clipping != 0.0)
    return "gradient_clipping > 0 (the norm needs every gradient first)";
  if (c.fp16.enabled) return "fp16 (its overflow check reads every gradient first)";
  if (c.gradient_accumulation_steps != 1) {
    return "gradient_accumulation_steps = " + std::to_string(c.gradient_accumulation_steps) +
           " (micro-batches would need a place to add up)";
  }
  return "";
}

// offload_optimizer.split_master. Unset: on with the optimizer on disk, where it halves the
// master's file at no cost; off with it in memory, where it saves 2 bytes of RAM per element
// but every step joins and splits the masters (and every existing run keeps its numbers).
// false: off; true: on, and an error where it cannot apply.
std::string why_no_split_master(const PlacementContext& ctx, const Placement& p) {
  if (p.precision != Precision::kBf16)
    return "bf16 (the extension completes a bf16 parameter to its fp32 master)";
  if (p.optimizer_on_disk()) return "";
  if (p.stage == 0) return "stage >= 1 (stage 0 keeps the whole fp32 master on every rank)";
  if (p.delayed_update) return "delayed_param_update = false (it steps its own fp32 master)";
  if (p.compute_on_device) return "the compute on the CPU when the master is in memory";
  if (ctx.torch_optimizer) return "the fused optimizer backend";
  return "";
}

bool resolve_split_master(const config::Config& c, const PlacementContext& ctx,
                          const Placement& p) {
  const std::optional<bool>& asked = c.zero.offload_optimizer.split_master;
  if (asked ? !*asked : !p.optimizer_on_disk()) return false;
  const std::string why = why_no_split_master(ctx, p);
  ZOFF_CHECK_ARG(!asked || why.empty(),
                 "zero_optimization.offload_optimizer.split_master = true needs ", why);
  return why.empty();
}

bool rss_first_heap(int64_t param_bytes, int64_t available_bytes) {
  return available_bytes <= 0 || param_bytes > available_bytes / 4;
}

Placement resolve(const config::Config& config, const PlacementContext& context, bool announce) {
  check_stage(config, context);
  Placement p;
  p.stage = config.zero.stage;
  p.precision = precision_of(config);
  p.compute_on_device = context.compute_on_device;
  p.states = optim::parse_state_dtype(config.optimizer.state_dtype);
  resolve_stores(config, context, &p);
  if (p.compute_on_device) check_device(p);
  p.grads = resolve_grads(config, context, announce);
  p.master_is_params =
      master_is_params(p.precision, p.stage, p.optimizer.store, p.compute_on_device);
  p.split_master = resolve_split_master(config, context, p);
  p.params_per_host = p.stage >= 1 && p.stage <= 2 && context.world > 1 &&
                      config.zero.host_shared_params && !p.compute_on_device;
  const int64_t param_bytes = context.shard_elems * std::max(context.world, 1) *
                              static_cast<int64_t>(element_bytes(p.precision));
  p.rss_first_heap = p.params_on_disk() && rss_first_heap(param_bytes, context.available_bytes);
  return p;
}

}  // namespace zoff::placement
