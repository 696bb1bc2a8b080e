// The ZeRO model-state memory model: bytes per rank and per node for stages 0-3.
#include "zoff/estimate/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "zoff/core/error.h"
#include "zoff/placement/state_bytes.h"

namespace zoff::estimate {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  throw UsageError("precision = \"" + name + "\": must be fp32, bf16 or fp16");
}

OffloadTier parse_offload(const std::string& name) {
  if (name == "none") return OffloadTier::kNone;
  if (name == "cpu") return OffloadTier::kCpu;
  if (name == "nvme") return OffloadTier::kNvme;
  throw UsageError("offload = \"" + name + "\": must be none, cpu or nvme");
}

std::string to_string(OffloadTier t) {
  switch (t) {
    case OffloadTier::kNone:
      return "none";
    case OffloadTier::kCpu:
      return "cpu";
    case OffloadTier::kNvme:
      return "nvme";
  }
  return "?";
}

int64_t adam_state_bytes(StateDtype dtype, int64_t elems) {
  return 2 * static_cast<int64_t>(optim::state_storage_bytes(dtype, static_cast<size_t>(elems)));
}

namespace {

// The placement a config of this stage, precision, offload tier and state dtype resolves to
// (stage 0 with offload too, which the paper's table shows and a config cannot ask for).
placement::Placement stage_placement(int stage, const EstimateOptions& o) {
  placement::Placement p;
  p.stage = stage;
  p.precision = o.precision;
  p.states = o.state_dtype;
  const bool offload = o.offload != OffloadTier::kNone;
  p.optimizer.store = !offload                         ? placement::Store::kCompute
                      : o.offload == OffloadTier::kCpu ? placement::Store::kHost
                                                       : placement::Store::kNvme;
  p.master_is_params = placement::master_is_params(p.precision, stage, p.optimizer.store,
                                                   /*compute_on_device=*/false);
  p.split_master =
      o.split_master && p.optimizer_on_disk() && p.precision == placement::Precision::kBf16;
  return p;
}

StageEstimate estimate_stage(int stage, const EstimateOptions& o, int64_t ranks_per_node) {
  const bool offload = o.offload != OffloadTier::kNone;
  const int64_t psi = o.params;
  const int64_t shard = (psi + o.ranks - 1) / o.ranks;  // elements per rank, padded
  const placement::Placement pl = stage_placement(stage, o);
  placement::StateShape shape;
  shape.params = psi;
  shape.shard = stage >= 1 ? shard : psi;
  const placement::StateBytes b = placement::state_bytes(pl, shape);
  const int64_t param_bytes = static_cast<int64_t>(placement::element_bytes(pl.precision));
  // The paper's 16-bit gradients (fp32_gradients false) halve what zoff holds in fp32.
  const int64_t grad_bytes =
      pl.precision != placement::Precision::kFp32 && !o.fp32_gradients ? 2 : 4;
  const int64_t grad_elems = stage >= 2 ? shard : psi;
  // Stages 1-2 with one copy per host: this rank's share of it, like stage 3's shard.
  const bool shared_copy = o.host_shared_params && (stage == 1 || stage == 2);
  // The master and the states wherever the placement puts them (on disk counted too: the
  // paper's offload tier).
  const int64_t optim = b.memory_master + b.memory_states + b.disk_master + b.disk_states;

  StageEstimate e;
  e.stage = stage;
  e.compute_params_bytes = shared_copy ? param_bytes * shard : b.memory_params + b.disk_params;
  if (!offload) {
    e.compute_grads_bytes = grad_bytes * grad_elems;
    e.compute_optim_bytes = optim;
  } else {
    // Unsharded gradients (stages 0, 1) stay where backward writes them; the fp32 copy of
    // this rank's shard and its optimizer states (with their own fp32 master) move out.
    e.compute_grads_bytes = stage >= 2 ? 0 : grad_bytes * grad_elems;
    e.offload_grads_bytes = 4 * (stage >= 1 ? shard : psi);
    e.offload_optim_bytes = optim;
  }
  if (stage == 3) e.compute_live_bytes = param_bytes * std::min(o.live_params, psi);
  e.compute_bytes =
      e.compute_params_bytes + e.compute_grads_bytes + e.compute_optim_bytes + e.compute_live_bytes;
  e.offload_bytes = e.offload_grads_bytes + e.offload_optim_bytes;
  e.per_rank_bytes = e.compute_bytes + e.offload_bytes;
  e.per_node_compute_bytes = e.compute_bytes * ranks_per_node;
  e.per_node_offload_bytes = e.offload_bytes * ranks_per_node;
  e.per_node_bytes = e.per_rank_bytes * ranks_per_node;
  return e;
}

std::string gb_and_gib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%9.2f GB %9.2f GiB", static_cast<double>(bytes) / 1e9,
                static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30));
  return buf;
}

std::string human_count(int64_t n) {
  char buf[64];
  const double d = static_cast<double>(n);
  if (d >= 1e12) {
    std::snprintf(buf, sizeof(buf), "%.3gT", d / 1e12);
  } else if (d >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.3gB", d / 1e9);
  } else if (d >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.3gM", d / 1e6);
  } else if (d >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%.3gK", d / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(n));
  }
  return buf;
}

}  // namespace

MemoryEstimate estimate_memory(const EstimateOptions& o) {
  ZOFF_CHECK_ARG(o.params >= 1, "params = ", o.params, ": must be >= 1");
  ZOFF_CHECK_ARG(o.ranks >= 1, "ranks = ", o.ranks, ": must be >= 1");
  ZOFF_CHECK_ARG(o.nodes >= 1, "nodes = ", o.nodes, ": must be >= 1");
  ZOFF_CHECK_ARG(o.ranks % o.nodes == 0, "nodes = ", o.nodes, ": must divide ranks (", o.ranks,
                 ")");
  ZOFF_CHECK_ARG(!o.host_shared_params || o.nodes == 1, "host_shared_params with nodes = ", o.nodes,
                 ": only the ranks of one node share their parameters");
  // 16 bytes per parameter must not overflow int64: psi up to ~5.7e17.
  ZOFF_CHECK_ARG(o.params <= (int64_t{1} << 58), "params = ", o.params, ": too large");
  MemoryEstimate m;
  m.options = o;
  m.ranks_per_node = o.ranks / o.nodes;
  for (int s = 0; s < 4; ++s) m.stages[s] = estimate_stage(s, o, m.ranks_per_node);
  return m;
}

std::string to_json(const MemoryEstimate& m) {
  nlohmann::ordered_json j;
  j["params"] = m.options.params;
  j["ranks"] = m.options.ranks;
  j["nodes"] = m.options.nodes;
  j["ranks_per_node"] = m.ranks_per_node;
  j["precision"] = to_string(m.options.precision);
  j["offload"] = to_string(m.options.offload);
  j["state_dtype"] = optim::state_dtype_name(m.options.state_dtype);
  j["host_shared_params"] = m.options.host_shared_params;
  nlohmann::ordered_json stages = nlohmann::ordered_json::object();
  for (const StageEstimate& e : m.stages) {
    nlohmann::ordered_json s;
    s["per_rank_bytes"] = e.per_rank_bytes;
    s["per_node_bytes"] = e.per_node_bytes;
    s["compute_bytes"] = e.compute_bytes;
    s["offload_bytes"] = e.offload_bytes;
    s["per_node_compute_bytes"] = e.per_node_compute_bytes;
    s["per_node_offload_bytes"] = e.per_node_offload_bytes;
    s["compute"] = {{"params", e.compute_params_bytes},
                    {"grads", e.compute_grads_bytes},
                    {"optim", e.compute_optim_bytes},
                    {"live_units", e.compute_live_bytes}};
    s["offload"] = {{"grads", e.offload_grads_bytes}, {"optim", e.offload_optim_bytes}};
    stages[std::to_string(e.stage)] = s;
  }
  j["stages"] = stages;
  return j.dump(2);
}

std::string to_table(const MemoryEstimate& m) {
  const EstimateOptions& o = m.options;
  const bool offload = o.offload != OffloadTier::kNone;
  const std::string tier = o.offload == OffloadTier::kNvme ? "nvme" : "host";
  std::ostringstream os;
  os << "Model states for " << human_count(o.params) << " params (" << o.params << ") on "
     << o.ranks << (o.ranks == 1 ? " rank, " : " ranks, ") << o.nodes
     << (o.nodes == 1 ? " node" : " nodes") << " (" << m.ranks_per_node << " per node), "
     << (o.precision == Precision::kFp32 ? "fp32" : to_string(o.precision) + " mixed precision")
     << ", offload " << to_string(o.offload) << ", optimizer states "
     << optim::state_dtype_name(o.state_dtype)
     << (o.host_shared_params ? ", one copy of the parameters per node at stages 1-2" : "") << ".\n"
     << "GB = 1e9 bytes, GiB = 2^30 bytes. Model states only: activations, communication "
        "buffers and fragmentation come on top.\n\n";
  const char* names[4] = {"0 (data parallel)", "1 (+ optimizer)", "2 (+ gradients)",
                          "3 (+ parameters)"};
  char line[512];
  if (offload) {
    std::snprintf(line, sizeof(line), "%-18s | %-26s | %-26s | %-26s | %-26s\n", "ZeRO stage",
                  "per rank: device", ("per rank: " + tier).c_str(), "per node: device",
                  ("per node: " + tier).c_str());
  } else {
    std::snprintf(line, sizeof(line), "%-18s | %-26s | %-26s\n", "ZeRO stage", "per rank: device",
                  "per node: device");
  }
  os << line << std::string(offload ? 138 : 76, '-') << "\n";
  for (const StageEstimate& e : m.stages) {
    if (offload) {
      std::snprintf(line, sizeof(line), "%-18s | %s | %s | %s | %s\n", names[e.stage],
                    gb_and_gib(e.compute_bytes).c_str(), gb_and_gib(e.offload_bytes).c_str(),
                    gb_and_gib(e.per_node_compute_bytes).c_str(),
                    gb_and_gib(e.per_node_offload_bytes).c_str());
    } else {
      std::snprintf(line, sizeof(line), "%-18s | %s | %s\n", names[e.stage],
                    gb_and_gib(e.compute_bytes).c_str(),
                    gb_and_gib(e.per_node_compute_bytes).c_str());
    }
    os << line;
  }
  return os.str();
}

}  // namespace zoff::estimate
