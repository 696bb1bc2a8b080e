// The ZeRO training engine: owns a module's model states and runs backward/step on them.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/core/device_transfer.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/activation_meter.h"
#include "zoff/engine/compute_params.h"
#include "zoff/engine/delayed_update.h"
#include "zoff/engine/grad_reducer.h"
#include "zoff/engine/grad_sink.h"
#include "zoff/engine/loss_scaler.h"
#include "zoff/engine/master_store.h"
#include "zoff/engine/memory_stats.h"
#include "zoff/engine/replicated_states.h"
#include "zoff/engine/step_times.h"
#include "zoff/engine/tiered_optimizer.h"
#include "zoff/engine/unit_gatherer.h"
#include "zoff/engine/unit_pieces.h"
#include "zoff/engine/unit_plan.h"
#include "zoff/engine/whole_params.h"
#include "zoff/offload/tier.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/flat_layout.h"
#include "zoff/partition/model_layout.h"
#include "zoff/placement/placement.h"
#include "zoff/unit/deferred_init.h"

namespace zoff::engine {

struct EngineOptions {
  // Which optimizer implementation updates the shard (fused kernels by default; LibTorch's
  // optimizers on the shard as the reference path).
  optim::OptimizerBackend optimizer_backend = optim::OptimizerBackend::kFused;
  int optimizer_threads = 1;
  // Values of parameters the module holds as placeholders (unit::defer_parameters): the
  // engine calls it unit by unit into its staging buffer, so a model larger than RAM is
  // never whole in memory. Needed exactly when some trainable parameter is deferred.
  unit::ParamInit param_init;
  // Runs the GPU path's data movement (stages 1-2: gradients staged in host buffers
  // through the device transfer, the parameters gathered in host memory and copied to the
  // compute buffer) with a CPU module, the CPU standing in for the device: what lets the
  // tests check that path on machines without a GPU. Same results as the usual CPU path.
  bool device_path_on_cpu = false;
  // The modules whose parameters each form one unit (plan_units): what stage 3 gathers
  // around a module's forward, and the pieces gradient buckets are made of. Empty: each
  // top-level child, each element of a top-level container. A Hugging Face model's decoder
  // layers, say, where they sit deeper than that.
  std::vector<const torch::nn::Module*> unit_modules;
};

// What one optimizer step did.
struct StepStats {
  int64_t step = 0;        // optimizer steps done, including this one (and skipped ones)
  double lr = 0.0;         // the learning rate this step used
  double grad_norm = 0.0;  // global L2 norm of the averaged, unscaled gradient, pre-clipping
  bool clipped = false;
  bool skipped = false;     // fp16 overflow: no update, every rank skipped
  double loss_scale = 0.0;  // fp16: the scale backward used this step; 0 otherwise
  StepTimes times;          // this rank's wall-clock time of the step's phases
};

// The ZeRO-Offload data flow, per optimizer step:
//   forward/backward in the compute dtype (fp32, bf16 or fp16) on the compute device;
//   the model's trainable parameters are partitioned into units (unit_plan.h), each with
//   its own flat layout; at stages 1-3 every rank owns 1/N of every unit, and its pieces
//   of all units, concatenated, are its shard space;
//   gradients accumulate in fp32 and are reduced bucket by bucket, buckets made of whole
//   units (stage 0: all-reduce; 1: reduce-scatter at the accumulation boundary; 2:
//   reduce-scatter every micro-batch as backward goes; 3: each unit as soon as its
//   backward is done);
//   the fp32 master shard, optimizer states and fp32 gradient shard live in the offload
//   tier (host memory) with offload_optimizer.device = cpu, else on the compute device;
//   one fused pass updates the master and writes the 16-bit copy of the shard;
//   with offload_optimizer.device = nvme the master and optimizer states live in files
//   under nvme_path instead and the pass streams through them in sub-groups
//   (tiered_optimizer.h), same kernels, same result bit for bit;
//   stages 1, 2: the new shards are all-gathered unit by unit into every rank's whole
//   parameters; stage 3 keeps only the shards and gathers a unit when the model runs it
//   (unit_gatherer.h, zoff::unit_forward / with_unit in unit_call.h).
// Usage, per optimizer step:
//   for (k = 0; k < config.gradient_accumulation_steps; ++k) engine.backward(loss_k);
//   auto stats = engine.step();
// The module must be fp32 when handed over: the engine takes its values (rank 0's) as the
// fp32 master and converts the module's parameters to the compute dtype itself. The
// parameters become views into the engine's buffers; forward is unchanged (inputs must
// match the compute dtype). Tied parameters are trained once. Frozen parameters and
// buffers stay whole (replicated_states.h). All ranks call backward() and step() equally
// often. One engine per model.
class ZeroEngine {
 public:
  ZeroEngine(std::shared_ptr<torch::nn::Module> module, config::Config config, dist::CommPtr comm,
             EngineOptions options = {});
  ~ZeroEngine();
  ZeroEngine(const ZeroEngine&) = delete;
  ZeroEngine& operator=(const ZeroEngine&) = delete;

  // One micro-batch: backpropagates loss / gradient_accumulation_steps (times the fp16 loss
  // scale) and reduces gradients as the stage requires.
  void backward(const torch::Tensor& loss);
  // Averages, checks overflow (fp16), clips, updates this rank's shard, publishes the new
  // parameters (all-gather at stages 1, 2), broadcasts rank 0's buffers.
  StepStats step();

  // Applies an update still running in the background (delayed parameter update), so the
  // compute parameters reflect every step taken. Call before evaluating, saving or
  // exporting; a no-op otherwise. Collective.
  void synchronize();

  // Calls fn(slot, values) for every trainable parameter once (a tied one under its first
  // name), in layout order, with its whole values in the compute dtype (a view: copy what
  // must outlive the call). Stage 3 gathers one unit at a time (from disk with
  // offload_param nvme) and releases it after its parameters, so no more than one unit is
  // whole beyond what training keeps. Collective: every rank calls it.
  void visit_parameters(
      const std::function<void(const partition::ParamSlot&, const torch::Tensor&)>& fn);

  MemoryStats memory() const;
  int64_t global_step() const { return step_; }
  const config::Config& config() const { return config_; }
  // Where each model state lives, resolved once from the config (placement.h).
  const placement::Placement& placement() const { return placement_; }
  const partition::ModelLayout& layout() const { return *layout_; }
  const dist::CommPtr& comm() const { return comm_; }
  torch::ScalarType compute_dtype() const { return compute_dtype_; }
  // Stages 0-2: the whole parameters, flat (compute dtype, padded, layout order).
  // Stage 3: this rank's shard space (compute dtype).
  torch::Tensor flat_params() const;
  // This rank's range of the rank-major concatenation of all ranks' shard spaces:
  // {rank * layout().shard_size(), layout().shard_size()} (how checkpoints split state).
  partition::Shard shard() const { return shard_; }
  // The in-memory optimizer (not with offload_optimizer.device = nvme: see tiered()).
  optim::ShardOptimizer& optimizer();
  // The NVMe-streamed optimizer, or nullptr.
  const TieredOptimizer* tiered() const { return store_->tiered(); }
  // The split master (placement().split_master): the odd ties this rank's steps settled
  // so far, over store_numel() elements.
  uint64_t split_master_settled() const { return store_->settled_count(); }
  size_t store_numel() const { return store_->numel(); }
  // "io_uring, O_DIRECT"-style description of the disk tier's I/O, or "" without one.
  std::string nvme_io() const { return store_->io_description(); }
  const LossScaler* loss_scaler() const { return scaler_.get(); }
  LossScaler* loss_scaler() { return scaler_.get(); }
  const ReplicatedStates& replicated() const { return *replicated_; }
  // Tied tensors' second names: (name, first name).
  const std::vector<std::pair<std::string, std::string>>& aliases() const { return plan_.aliases; }
  // Stage 3 only (else nullptr): unit states and the live-parameter bound.
  const UnitGatherer* gatherer() const { return params_->gatherer(); }
  // The step in progress so far (any thread may ask while it runs): stage 3's units through
  // forward and backward, the disk step's sub-groups, the waits for the disk. Reset when
  // step() returns (its StepStats::times keep the waits).
  StepProgress progress() const { return step_meter_.snapshot(); }

  // --- Checkpoint access: everything a rank must save to resume, over shard().size
  // elements (this rank's shard space), writable in place. Same shape of data at every
  // stage. Call synchronize() first when delayed parameter update is on.
  // Every section, master first then the optimizer's states as stored (state_dtype: fp32,
  // bf16 bits, int8 codes each followed by its scales), wherever they live (host memory or
  // the NVMe tier): what checkpoints stream. At stage 0 they are this rank's slice of the
  // whole-buffer states (int8: its codes and its own scales, the blocks restarting there).
  std::vector<StateSection> state_sections();
  // In-memory only (not with offload_optimizer.device = nvme, which throws):
  // The fp32 values of this rank's parameters (the master copy when one exists).
  torch::Tensor master_shard();
  // The optimizer's fp32 state (e.g. "exp_avg", "exp_avg_sq") over this rank's shard; with
  // bf16 or int8 states it throws (use state_sections()).
  std::vector<std::pair<std::string, torch::Tensor>> optimizer_state_shard();
  // After writing master_shard() and optimizer_state_shard() on every rank (a collective):
  // rebuilds the compute parameters and any replicated state from the shards, and sets
  // the step counts. Training then continues exactly where the checkpoint was taken.
  // `applied_steps` (steps that updated, for the lr schedule) defaults to `step`.
  void restore_from_shards(int64_t step, int64_t applied_steps = -1);
  int64_t applied_steps() const { return applied_; }

 private:
  void resolve_placement();
  void check_device() const;
  // The GPU path: a module on an accelerator (or options_.device_path_on_cpu).
  bool on_device() const { return !compute_device_.is_cpu() || options_.device_path_on_cpu; }
  ComputeParamsSetup compute_params_setup() const;
  void setup_states();
  void load_unit_values();
  void setup_reducer();
  int64_t largest_bucket_piece() const;
  StepStats apply_step();  // step() without its timing
  bool skip_overflowed_step(const torch::Tensor& grads, StepStats* stats);
  // The global norm (and clipping) of the step's gradient; `squares`: the local sum of
  // squares when a pass already computed it.
  void clip_and_measure(const torch::Tensor& grads, std::optional<double> squares,
                        StepStats* stats);
  void update(const torch::Tensor& grads, double lr);
  void launch_delayed_update(const torch::Tensor& grads, double lr);
  bool update_pending() const { return delayed_ && delayed_->pending(); }
  void finish_step();

  std::shared_ptr<torch::nn::Module> module_;
  config::Config config_;
  dist::CommPtr comm_;
  EngineOptions options_;
  placement::Placement placement_;
  int stage() const { return placement_.stage; }
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  torch::Device compute_device_ = torch::kCPU;
  // Gradients out to host staging, parameters back in (plain copies on the CPU).
  std::unique_ptr<DeviceTransfer> transfer_;
  UnitPlan plan_;
  std::vector<torch::Tensor> trainable_;  // plan_.trainable's tensors
  std::unique_ptr<partition::ModelLayout> layout_;
  partition::Shard shard_;
  // In this order so that the store (whose disk step writes stage 3's parameter region) goes
  // before the parameters that own that region, as ~ZeroEngine does too.
  StepMeter step_meter_;  // the step in progress, as params_ and store_ report it (before them)
  std::unique_ptr<ComputeParams> params_;  // what the model computes with
  std::unique_ptr<MasterStore> store_;     // the fp32 master and the optimizer states
  std::unique_ptr<GradSink> sink_;         // gradients the store keeps; the overlapped step
  std::unique_ptr<ReplicatedStates> replicated_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<DelayedUpdate> delayed_;  // offload_optimizer.delayed_param_update
  int64_t step_ = 0;                        // optimizer steps, including fp16-skipped ones
  int64_t applied_ = 0;  // steps that updated the parameters (drives the lr schedule)
  int micro_ = 0;
  StepTimes times_;  // the step in progress: backward adds, step() completes and resets
  ActivationMeter meter_;
};

}  // namespace zoff::engine
