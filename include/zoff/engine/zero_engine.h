// The ZeRO training engine: owns a module's model states and runs backward/step on them.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/grad_reducer.h"
#include "zoff/engine/loss_scaler.h"
#include "zoff/engine/memory_stats.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/flat_layout.h"

namespace zoff::engine {

struct EngineOptions {
  // Which optimizer implementation updates the shard (fused kernels by default; LibTorch's
  // optimizers on the shard as the reference path).
  optim::OptimizerBackend optimizer_backend = optim::OptimizerBackend::kFused;
  int optimizer_threads = 1;
};

// What one optimizer step did.
struct StepStats {
  int64_t step = 0;        // optimizer steps done, including this one (and skipped ones)
  double lr = 0.0;         // the learning rate this step used
  double grad_norm = 0.0;  // global L2 norm of the averaged, unscaled gradient, pre-clipping
  bool clipped = false;
  bool skipped = false;     // fp16 overflow: no update, every rank skipped
  double loss_scale = 0.0;  // fp16: the scale backward used this step; 0 otherwise
};

// The ZeRO-Offload data flow, per optimizer step:
//   forward/backward in the compute dtype (fp32, bf16 or fp16) on the compute device;
//   gradients reduced in fp32, bucket by bucket (stage 0: all-reduce; 1: reduce-scatter at
//   the accumulation boundary; 2: reduce-scatter every micro-batch as backward goes);
//   the fp32 master shard, optimizer states and fp32 gradient shard live in the offload
//   tier (host memory) with offload_optimizer.device = cpu, else on the compute device;
//   one fused pass updates the master and writes the 16-bit copy of the shard;
//   the 16-bit (or fp32) shards are all-gathered into every rank's compute parameters.
// Usage, per optimizer step:
//   for (k = 0; k < config.gradient_accumulation_steps; ++k) engine.backward(loss_k);
//   auto stats = engine.step();
// The module must be fp32 when handed over: the engine takes its values as the fp32
// master and converts the module's parameters to the compute dtype itself. The
// parameters become views into the engine's flat buffer; forward is unchanged (inputs
// must match the compute dtype). All ranks call backward() and step() equally often.
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
  // Averages, checks overflow (fp16), clips, updates this rank's shard, all-gathers.
  StepStats step();

  // Applies an update still running in the background (delayed parameter update), so the
  // compute parameters reflect every step taken. Call before evaluating, saving or
  // exporting; a no-op otherwise. Collective.
  void synchronize();

  MemoryStats memory() const;
  int64_t global_step() const { return step_; }
  const config::Config& config() const { return config_; }
  const partition::FlatLayout& layout() const { return *layout_; }
  const dist::CommPtr& comm() const { return comm_; }
  torch::ScalarType compute_dtype() const { return compute_dtype_; }
  // The flat parameter buffer (compute dtype, padded) and this rank's shard of it.
  torch::Tensor flat_params() const { return params_->flat(); }
  partition::Shard shard() const { return shard_; }
  optim::ShardOptimizer& optimizer() { return *optimizer_; }
  const LossScaler* loss_scaler() const { return scaler_.get(); }
  LossScaler* loss_scaler() { return scaler_.get(); }

  // --- Checkpoint access: everything a rank must save to resume, as fp32 1-D tensors of
  // shard().size elements (this rank's range [shard().offset, shard().end()) of the
  // padded flat layout), writable in place. Same shape of data at every stage.
  // Call synchronize() first when delayed parameter update is on.
  // The fp32 values of this rank's parameters (the master copy when one exists).
  torch::Tensor master_shard();
  // The optimizer's state (e.g. "exp_avg", "exp_avg_sq") over this rank's shard.
  std::vector<std::pair<std::string, torch::Tensor>> optimizer_state_shard();
  // After writing master_shard() and optimizer_state_shard() on every rank (a collective):
  // rebuilds the compute parameters and any replicated state from the shards, and sets
  // the step counts. Training then continues exactly where the checkpoint was taken.
  // `applied_steps` (steps that updated, for the lr schedule) defaults to `step`.
  void restore_from_shards(int64_t step, int64_t applied_steps = -1);
  int64_t applied_steps() const { return applied_; }

 private:
  bool any_overflow(const torch::Tensor& grads);
  void launch_delayed_update(const torch::Tensor& grads, double lr);
  void update_master(const torch::Tensor& grads, double lr, const torch::Tensor& out16);
  void write_compute_shard();
  void all_gather_params();

  std::shared_ptr<torch::nn::Module> module_;
  config::Config config_;
  dist::CommPtr comm_;
  EngineOptions options_;
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  torch::Device compute_device_ = torch::kCPU;
  torch::Device offload_device_ = torch::kCPU;  // where master/states/grad shard live
  bool offload_ = false;
  std::vector<torch::Tensor> module_params_;
  std::unique_ptr<partition::FlatLayout> layout_;
  std::unique_ptr<partition::FlatBuffer> params_;  // compute dtype, compute device
  partition::Shard shard_;
  // fp32 values the optimizer updates: its own buffer (16-bit compute or offload), else a
  // view of params_ (stage 0: the whole buffer; stages 1, 2: this rank's range).
  torch::Tensor master_;
  bool master_owned_ = false;
  int64_t opt_offset_ = 0;  // where master_ starts in the flat layout
  torch::Tensor out16_;     // host staging for the 16-bit copy-out when compute is not CPU
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<optim::ShardOptimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  int64_t step_ = 0;     // optimizer steps, including fp16-skipped ones
  int64_t applied_ = 0;  // steps that updated the parameters (drives the lr schedule)
  int micro_ = 0;
  // Delayed parameter update: the gradient copy and 16-bit output the background update
  // owns, and the update itself.
  bool dpu_ = false;
  torch::Tensor dpu_grads_;
  torch::Tensor dpu_out_;
  std::future<void> pending_update_;
};

}  // namespace zoff::engine
