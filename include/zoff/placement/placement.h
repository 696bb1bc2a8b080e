// Placement: where each model state lives and in what dtype, one typed value resolved once
// from the config and used alike by the engine, the planner, the estimator and the reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::placement {

// The dtype forward and backward compute in (the compute parameters' dtype).
enum class Precision { kFp32, kBf16, kFp16 };

// Bytes per compute element: 4 for fp32, 2 for bf16 and fp16.
size_t element_bytes(Precision precision);
std::string to_string(Precision precision);

// A place model-state bytes live in. Adding a tier: one value here, one class in offload/
// (a Tier), its case in offload::make_tier and in to_string.
enum class Store {
  kCompute,      // beside the compute parameters, no offload (RAM when computing on the CPU)
  kHost,         // host memory, the offload tier (config "cpu")
  kNvme,         // files under one nvme_path
  kNvmeStriped,  // files striped over several nvme_paths, one stripe per directory in turn
};

// "compute", "host", "nvme", "nvme striped over 2 paths" (what a report prints).
std::string to_string(Store store);
// True for the stores whose bytes are on disk, streamed through host buffers.
bool on_disk(Store store);

// Where one rank's fp32 gradient (its shard at stages 2-3) waits for the step.
enum class GradStore {
  kMemory,    // a tensor in memory, beside the master
  kDisk,      // a region of the optimizer's disk store, summed read-add-write
  kStreamed,  // nowhere: each sub-group is consumed by the overlapped step as it completes
};
std::string to_string(GradStore grads);

// A disk store's directories (one for kNvme, two or more for kNvmeStriped).
struct StorePlace {
  Store store = Store::kCompute;
  std::vector<std::string> paths;
};

struct Placement {
  int stage = 0;
  Precision precision = Precision::kFp32;
  // Forward and backward on an accelerator (one GPU per rank), the model states offloaded.
  bool compute_on_device = false;
  // The fp32 master and the optimizer states (always together).
  StorePlace optimizer;
  optim::StateDtype states = optim::StateDtype::kFp32;
  // fp32 compute with the master beside the parameters in one buffer: no separate master
  // (stage 0 without offload; stage 3 on the CPU with the optimizer in memory).
  bool master_is_params = false;
  // The fp32 master stored as the bf16 compute copy plus a 16-bit extension
  // (offload_optimizer.split_master; bf16: by default with the optimizer on disk, asked for
  // in memory at stages 1-3): 2 bytes per element, on disk or in memory.
  bool split_master = false;
  GradStore grads = GradStore::kMemory;
  // Stage 3: this rank's parameter pieces (kCompute: in memory; or a disk store written by
  // the step). Stages 0-2 hold whole parameters in memory: kCompute.
  StorePlace params;
  // Stages 1-2 on the CPU with several ranks: one copy of the parameters per host, mapped by
  // every rank of it, when the transport can share memory (the engine falls back to a copy
  // per rank, with one line, when it cannot).
  bool params_per_host = false;
  // The disk store's step runs while the last micro-batch's backward computes (no
  // clipping, no fp16): sub-groups are updated as their gradients become final.
  bool overlap_step = false;
  // The update of step t runs in the background while step t+1 computes (host store only).
  bool delayed_update = false;
  // Host buffers the device copies to and from are page-locked (offload_optimizer.pin_memory).
  bool pin_memory = false;
  // Freed heap blocks of 4 MiB or more leave RSS at once, instead of staying (up to 32 MiB)
  // for the next step: parameters on disk in a run short of memory (rss_first_heap()).
  bool rss_first_heap = false;
  // Freed blocks of 32 MiB or more stay mapped for the next request (core/large_block_cache.h):
  // every run but those with rss_first_heap. In a run short of memory what is kept through
  // the step adds to the peak RSS it is on disk for (a cache of blocks of 4 MiB or more tried
  // on 2026-11-29 gave gpt xl on disk +0.3 GB of peak RSS: docs/cpp_api.md); in the others
  // (gpt 1.3b on disk on 24 GB) the blocks would be faulted and zeroed again every step.
  bool keep_large_blocks() const { return !rss_first_heap; }

  bool offloaded() const { return optimizer.store != Store::kCompute; }
  bool optimizer_on_disk() const { return on_disk(optimizer.store); }
  bool params_on_disk() const { return on_disk(params.store); }
  // The fp32 gradient shard is held in memory (not on disk, not streamed).
  bool grads_in_memory() const { return grads == GradStore::kMemory; }
  // "stage 2, bf16; master and states (int8): host; gradients: memory; parameters: memory".
  std::string describe() const;
};

// What resolving needs beyond the config.
struct PlacementContext {
  int world = 1;
  // This rank's optimizer elements (its shard, padded): offload_optimizer.gradients = auto
  // compares the fp32 gradient shard with the memory available.
  int64_t shard_elems = 0;
  // Bytes of memory available now (core/process_memory.h); 0 = unknown, gradients stay in
  // memory under "auto".
  int64_t available_bytes = 0;
  bool compute_on_device = false;
  // LibTorch's optimizers on the shard (--optimizer-backend torch): they cannot stream from
  // disk.
  bool torch_optimizer = false;
};

// The placement `config` asks for, with every cross-key rule checked here, once: a rule
// broken throws zoff::UsageError naming the key and value. offload_optimizer.gradients =
// auto becomes kStreamed or kDisk only at stage >= 2, bf16/fp32, with the optimizer on disk,
// when the fp32 gradient shard exceeds half of the available memory (kStreamed where the
// step can overlap a single backward, else kDisk); it prints one line then (`announce`).
Placement resolve(const config::Config& config, const PlacementContext& context,
                  bool announce = false);

// The rule for Placement::rss_first_heap, for a run with its parameters on disk: its 16-bit
// parameters (`param_bytes`, the whole model) would take more than a quarter of the memory
// available at start, or that is unknown (0). Such a run is on disk for its RAM, and mapping
// activation blocks afresh each step keeps ~9% of peak RSS off it (gpt xl: 5.10 against
// 5.58 GB) for ~17% of its speed; a run that could have kept its parameters in a quarter of
// RAM (gpt small, gpt xl on 24 GB) spends that memory on speed instead.
bool rss_first_heap(int64_t param_bytes, int64_t available_bytes);

// The rule for Placement::master_is_params: fp32 compute with the master beside the
// parameters, at stage 0 without offload (one whole buffer updated in place) or at stage 3
// on the CPU with the optimizer in memory (this rank's pieces are the master). Stages 1-2
// keep whole parameters apart from the master shard.
bool master_is_params(Precision precision, int stage, Store optimizer, bool compute_on_device);

// Why the streamed gradients cannot work with this config ("" when they can).
std::string why_not_streamed(const config::Config& config);

}  // namespace zoff::placement
