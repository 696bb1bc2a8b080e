// The training configuration: DeepSpeed-style JSON, parsed and validated in one place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zoff/optim/shard_optimizer.h"

namespace zoff::config {

// scheduler {type, params}: DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR, or none.
struct SchedulerConfig {
  std::string type;             // "" (constant lr) | WarmupLR | WarmupDecayLR | WarmupCosineLR
  double warmup_min_lr = 0.0;   // WarmupLR/WarmupDecayLR
  double warmup_max_lr = 1e-3;  // WarmupLR/WarmupDecayLR (defaults to optimizer lr)
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR (required)
  double warmup_min_ratio = 0.0;    // WarmupCosineLR
  double cos_min_ratio = 1e-4;      // WarmupCosineLR
};

struct OffloadConfig {
  std::string device = "none";  // none | cpu | nvme
  bool pin_memory = false;
  // Delayed parameter update (ZeRO-Offload paper, section 5.2): after warmup_steps normal
  // steps, the CPU optimizer step for step t runs in the background while forward and
  // backward of step t+1 run on the parameters of step t-1. Needs device = cpu.
  bool delayed_param_update = false;
  int64_t dpu_warmup_steps = 40;
  // nvme only: the directory of the per-rank tier files ("nvme_path": a string), or several
  // (a list), over which the files are striped (one stripe per directory in turn).
  std::vector<std::string> nvme_paths;
  // nvme only: fp32 host buffers of zero_optimization.sub_group_size elements the step
  // streams master and states through (DeepSpeed's buffer_count). 0 = three sub-groups'
  // worth, (1 + optimizer states) x 3, so that sub-group i+1 is read while i is updated
  // and i-1 written back. Fewer than one sub-group's worth is refused.
  int64_t buffer_count = 0;
  // nvme only (zoff): step each sub-group as soon as its gradients are final, while
  // backward goes on. Exact, so it applies only when nothing needs every gradient first:
  // gradient_clipping = 0 and no fp16 (the global norm or the overflow check would be
  // needed before any update); otherwise the step waits for backward to end.
  bool overlap_step = true;
  // nvme only (zoff): where the fp32 gradient shard accumulates. "cpu": in host memory
  // (4 bytes per shard element); "nvme": in a file of the tier, each reduced bucket added
  // into it (read, add, write) and each sub-group's gradients read back with its master
  // and states at the step, for shards larger than RAM; "stream": kept nowhere, each
  // sub-group's gradients held in host memory only from the reduction that completes them
  // to the overlapped step's update of that sub-group (a bounded window, see
  // stream_buffers), for models whose gradient shard fits neither RAM nor disk; needs the
  // overlapped step (overlap_step, gradient_clipping = 0, no fp16) and
  // gradient_accumulation_steps = 1. "auto" (default): when the shard would take more than
  // half of the memory available at start, "stream" where it can work, else "nvme";
  // otherwise "cpu". "nvme" needs bf16 or fp32 (fp16's overflow check reads every
  // gradient first).
  std::string gradients = "auto";
  // gradients = "stream": sub-group buffers (sub_group_size fp32 each) backward may fill
  // ahead of the step; 0 = room for the largest unit's (or bucket's) piece beside the
  // step's slots, at least 4 x slots and 8 (placement::auto_stream_buffers). Backward waits
  // when all are held.
  int64_t stream_buffers = 0;
  // bf16 (zoff): the fp32 master is stored as the bf16 parameter plus a 16-bit extension
  // (optim/split_master.h), 2 bytes per element instead of 4, on disk or in memory.
  // Unset (default): on with the optimizer on disk (bf16, the fused backend), off with it in
  // memory; false: the 4-byte master; true: on (in memory: stages 1-3, no delayed update),
  // and an error where it cannot apply.
  std::optional<bool> split_master;
};

// offload_param (stage 3): where each rank's parameter shards live. On a CPU-only machine
// "cpu" is where they are anyway; "nvme" puts them in files under nvme_path (needs
// offload_optimizer.device = "nvme", which writes each step's new pieces there).
struct OffloadParamConfig {
  std::string device = "none";  // none | cpu | nvme
  bool pin_memory = false;
  std::vector<std::string> nvme_paths;  // nvme only: one directory, or several (striped)
  // nvme only: elements of pieces read ahead of use into host memory (DeepSpeed's key).
  int64_t max_in_cpu = 1000000000;
};

struct ZeroConfig {
  int stage = 0;                              // 0, 1, 2, 3
  int64_t reduce_bucket_size = 500000000;     // elements
  int64_t allgather_bucket_size = 500000000;  // elements
  bool overlap_comm = true;
  bool contiguous_gradients = true;
  // zoff, stages 1-2 with every rank on one host (the shared-memory transport): the ranks
  // map one copy of the compute parameters instead of each gathering its own.
  bool host_shared_params = true;
  OffloadConfig offload_optimizer;
  // Stage 3 (elements): units gathered ahead of use; the cap on whole parameters of
  // units that are not persistent; units smaller than the threshold stay whole.
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_param_persistence_threshold = 100000;
  OffloadParamConfig offload_param;
  // Elements per sub-group of the optimizer step streamed from NVMe (DeepSpeed's key;
  // zoff's default is 1e7, not DeepSpeed's 1e9, so the host buffers stay ~0.5 GB).
  int64_t sub_group_size = 10000000;
};

// DeepSpeed's `aio` section: how the NVMe tier does its I/O (offload/aio_options.h).
struct AioConfig {
  int64_t block_size = 1048576;  // bytes per request, a multiple of 4096
  int64_t queue_depth = 8;       // requests in flight
  int64_t thread_count = 1;      // threads of the pread/pwrite fallback
  bool single_submit = false;
  bool overlap_events = true;
  std::string backend = "auto";  // zoff: auto | io_uring | threads
};

struct Fp16Config {
  bool enabled = false;
  double loss_scale = 0.0;  // 0 = dynamic
  int initial_scale_power = 16;
  int loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1.0;
};

struct Config {
  // Batch: train_batch_size = micro * grad_accum * world_size. Any two given determine
  // the third; all three given must agree.
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  double gradient_clipping = 0.0;  // 0 = off; else max global L2 norm
  int64_t steps_per_print = 10;
  // DeepSpeed's key: log each step's phase times (forward, backward, step and its parts) in
  // the step log and print them every steps_per_print steps (engine::StepTimes).
  bool wall_clock_breakdown = false;
  optim::OptimizerOptions optimizer;
  SchedulerConfig scheduler;
  ZeroConfig zero;
  AioConfig aio;
  bool bf16 = false;
  Fp16Config fp16;
  // DeepSpeed's activation_checkpointing section: present = on. zoff recomputes each gpt
  // block's forward in backward (also `zoff train --activation-checkpointing`).
  bool activation_checkpointing = false;
  std::vector<std::string> warnings;  // unknown keys etc., to print once
  int world_size = 1;                 // the data-parallel world the batch triple was resolved for
};

// Parses JSON text. `world_size` resolves the batch triple like DeepSpeed: all three given
// must agree; two given determine the third; train_batch_size alone or
// train_micro_batch_size_per_gpu alone implies gradient_accumulation_steps = 1; neither is an
// error. Keys follow DeepSpeed's names; differences from DeepSpeed, on purpose:
//  - scheduler.params.warmup_max_lr defaults to optimizer.params.lr (DeepSpeed: 0.001).
//  - optimizer type "Adam" is plain Adam (L2 weight decay) unless params.adam_w_mode is true;
//    DeepSpeed's own default for adam_w_mode is true.
//  - offload_optimizer needs stage >= 1, offload_param (device other than "none") stage 3;
//    device "nvme" needs nvme_path. zero_optimization.sub_group_size defaults to 1e7
//    (DeepSpeed: 1e9). DeepSpeed keys zoff does
//    not use (stage-3 and activation_checkpointing tuning) are accepted with a warning saying
//    what zoff does instead.
//  - duplicate keys in one object are an error (as in DeepSpeed), unknown keys a warning.
// Per-optimizer defaults when a param is absent follow torch: lr 1e-3 (adam/adamw),
// 1e-2 (adagrad), required (sgd); eps 1e-8, 1e-10 for adagrad. Any bad value throws
// zoff::UsageError naming the key and value, e.g.
// "config: zero_optimization.stage = 7: must be 0, 1, 2 or 3".
Config parse_config(const std::string& json_text, int world_size);
// Reads and parses a file; a missing/unreadable file is a UsageError naming the path.
Config load_config(const std::string& path, int world_size);

}  // namespace zoff::config
