// Bytes of model states (params, grads, optimizer states) per rank and per node, by ZeRO stage.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "zoff/optim/state_dtype.h"
#include "zoff/placement/placement.h"

namespace zoff::estimate {

// The compute dtype: the placement's own (its to_string names it).
using placement::Precision;
enum class OffloadTier { kNone, kCpu, kNvme };
// How Adam's m and v are stored (optimizer.state_dtype): the optimizer's own formats
// (optim/state_dtype.h; parse with optim::parse_state_dtype).
using optim::StateDtype;

// "fp32" | "bf16" | "fp16" and "none" | "cpu" | "nvme"; anything else is a UsageError.
Precision parse_precision(const std::string& name);
OffloadTier parse_offload(const std::string& name);
std::string to_string(OffloadTier t);

// Bytes of Adam's two states (m and v) over `elems` elements stored as `dtype`: 8 elems,
// 4 elems, or 2 (elems + 4 ceil(elems / 2048)) for int8 (codes plus scales); the same
// count the engine's optimizer reports (optim::state_storage_bytes, twice).
int64_t adam_state_bytes(StateDtype dtype, int64_t elems);

struct EstimateOptions {
  int64_t params = 0;  // psi, parameter count (elements)
  int64_t ranks = 1;   // N, data-parallel ranks in all
  int64_t nodes = 1;   // nodes; ranks / nodes ranks per node (must divide)
  OffloadTier offload = OffloadTier::kNone;
  Precision precision = Precision::kBf16;
  // zoff's engine accumulates and keeps gradients in fp32 (4 bytes) at every stage, also
  // with 16-bit compute; false gives the ZeRO paper's 16-bit gradients (its Table 1).
  bool fp32_gradients = true;
  // Stage 3: elements of units whole at once on a rank (in use plus prefetched), in the
  // compute dtype, on top of the shards. 0 = not counted.
  int64_t live_params = 0;
  // Storage of the optimizer states (the master stays fp32).
  StateDtype state_dtype = StateDtype::kFp32;
  // zoff on a CPU host (zero_optimization.host_shared_params): at stages 1-2 the ranks of
  // one node map one copy of the parameters, of which each rank counts its share (param
  // bytes x s). Needs nodes == 1: ranks on several nodes keep a copy each.
  bool host_shared_params = false;
  // With the optimizer on nvme and bf16: the fp32 master stored as the bf16 parameter plus a
  // 16-bit extension (offload_optimizer.split_master, on by default where it applies).
  bool split_master = true;
};

// Model-state bytes of one ZeRO stage. "compute" is the device the forward/backward runs on;
// "offload" is the host (cpu) or NVMe tier, zero without offload.
struct StageEstimate {
  int stage = 0;
  // Per rank, on the compute device.
  int64_t compute_params_bytes = 0;  // 16-bit (or fp32) parameters computed with
  int64_t compute_grads_bytes = 0;   // 16-bit (or fp32) gradients, full or sharded
  int64_t compute_optim_bytes = 0;   // fp32 master + m + v (mixed) or m + v (fp32)
                                     // (m + v as state_dtype stores them)
  int64_t compute_live_bytes = 0;    // stage 3: whole units (options.live_params)
  // Per rank, on the offload tier.
  int64_t offload_grads_bytes = 0;  // fp32 gradient shard
  int64_t offload_optim_bytes = 0;  // fp32 master + m + v of the shard
  int64_t compute_bytes = 0;        // sum of compute_*
  int64_t offload_bytes = 0;        // sum of offload_*
  int64_t per_rank_bytes = 0;       // compute + offload
  // Per node: every rank of a node holds the same amounts, so these are per rank times
  // ranks per node (device memory summed over the node's devices; host/NVMe shared).
  int64_t per_node_compute_bytes = 0;
  int64_t per_node_offload_bytes = 0;
  int64_t per_node_bytes = 0;
};

struct MemoryEstimate {
  EstimateOptions options;
  int64_t ranks_per_node = 1;
  std::array<StageEstimate, 4> stages;  // ZeRO stages 0, 1, 2, 3
};

// The memory model of the ZeRO paper (section 3 and Table 1), with zoff's fp32 gradients
// (where each state lives: docs/architecture.md). With psi params, N ranks and
// s = ceil(psi / N) elements per shard (zoff pads shards to equal size):
//   mixed precision (bf16/fp16), K = 12 (fp32 master 4 + m 4 + v 4 bytes):
//     stage 0: 2psi + 2psi + 12psi   stage 1: 2psi + 2psi + 12s
//     stage 2: 2psi + (2 + 12)s      stage 3: (2 + 2 + 12)s
//   (zoff's engine keeps fp32 gradients: 4 bytes where these say 2, see fp32_gradients;
//   stage 3 adds the units whole at once, live_params elements)
//   fp32: 4-byte params and grads and K = 8 (m, v: the params are their own master) at
//   stages 0 and 3; stages 1-2 keep an fp32 master shard apart from the whole parameters
//   (K = 12 there), as the engine does (placement::master_is_params).
//   With state_dtype bf16 / int8, the 8 bytes of m + v per element become 4 / ~2.004
//   (adam_state_bytes over each rank's elements).
// With offload the optimizer states of the shard (12 bytes per element in both precisions:
// in fp32 the offload tier keeps its own fp32 master copy) and an fp32 gradient shard
// (4 bytes per element) live in the offload tier; the compute device keeps the params it
// computes with (its shard only at stage 3) and, at stages 0 and 1 where gradients are not
// sharded, the full gradients. Stage 0 "shards" are the whole model.
// Throws UsageError for params <= 0, ranks < 1, nodes < 1, nodes not dividing ranks, or
// host_shared_params with nodes > 1.
MemoryEstimate estimate_memory(const EstimateOptions& options);

// {"params": N, "ranks": N, "nodes": K, "ranks_per_node": R, "precision": "bf16",
//  "offload": "cpu", "stages": {"0": {"per_rank_bytes": B, "per_node_bytes": B,
//  "compute_bytes": B, "offload_bytes": B, ...breakdown...}, "1": ..., "2": ..., "3": ...}}
std::string to_json(const MemoryEstimate& estimate);

// A readable table, one row per stage, in GB (1e9 bytes) and GiB (2^30 bytes).
std::string to_table(const MemoryEstimate& estimate);

}  // namespace zoff::estimate
