// The ZeRO training engine: owns a module's model states and runs backward/step on them.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/grad_reducer.h"
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
  int64_t step = 0;        // optimizer steps done, including this one
  double lr = 0.0;         // the learning rate this step used
  double grad_norm = 0.0;  // global L2 norm of the averaged gradient, before clipping
  bool clipped = false;
};

// Usage, per optimizer step:
//   for (k = 0; k < config.gradient_accumulation_steps; ++k) engine.backward(loss_k);
//   auto stats = engine.step();
// The module's parameters become views into the engine's flat buffer; the module's
// forward is unchanged. All ranks must call backward() and step() the same number of times.
class ZeroEngine {
 public:
  ZeroEngine(std::shared_ptr<torch::nn::Module> module, config::Config config, dist::CommPtr comm,
             EngineOptions options = {});

  // One micro-batch: backpropagates loss / gradient_accumulation_steps and, on the last
  // micro-batch of the accumulation (or every one, stage 2), reduces the gradients.
  void backward(const torch::Tensor& loss);
  // Averages, clips, updates this rank's shard, and all-gathers the parameters.
  StepStats step();

  MemoryStats memory() const;
  int64_t global_step() const { return step_; }
  const config::Config& config() const { return config_; }
  const partition::FlatLayout& layout() const { return *layout_; }
  const dist::CommPtr& comm() const { return comm_; }
  int micro_steps_pending() const { return micro_; }
  // The flat parameter buffer (padded) and this rank's shard of it.
  torch::Tensor flat_params() const { return params_->flat(); }
  partition::Shard shard() const { return shard_; }
  optim::ShardOptimizer& optimizer() { return *optimizer_; }
  // Sets the optimizer step count (for resuming from a checkpoint).
  void set_global_step(int64_t step);

  // --- Checkpoint access: everything a rank must save to resume, as fp32 1-D tensors of
  // shard().size elements (this rank's range [shard().offset, shard().end()) of the
  // padded flat layout), writable in place. Same shape of data at every stage.
  // The fp32 values of this rank's parameters (the master copy when one exists).
  torch::Tensor master_shard();
  // The optimizer's state (e.g. "exp_avg", "exp_avg_sq") over this rank's shard.
  std::vector<std::pair<std::string, torch::Tensor>> optimizer_state_shard();
  // After writing master_shard() and optimizer_state_shard() on every rank (a collective):
  // rebuilds the compute parameters and any replicated state from the shards, and sets
  // the step count. Training then continues exactly where the checkpoint was taken.
  void restore_from_shards(int64_t step);

 private:
  void all_gather_params();

  std::shared_ptr<torch::nn::Module> module_;
  config::Config config_;
  dist::CommPtr comm_;
  EngineOptions options_;
  std::vector<torch::Tensor> module_params_;
  std::unique_ptr<partition::FlatLayout> layout_;
  std::unique_ptr<partition::FlatBuffer> params_;
  partition::Shard shard_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<optim::ShardOptimizer> optimizer_;
  int64_t step_ = 0;
  int micro_ = 0;
};

}  // namespace zoff::engine
