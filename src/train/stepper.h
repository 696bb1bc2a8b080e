// The two owners of a training run's model states behind one interface: the zoff engine, or
// plain LibTorch (the --reference run the engine is checked against).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "zoff/config/config.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::train {

// What the loop needs from whoever owns the model states: the engine or plain LibTorch.
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual void backward(const torch::Tensor& loss) = 0;
  virtual engine::StepStats step() = 0;
  virtual engine::MemoryStats memory() const = 0;
  // Lands any update still in flight (delayed parameter update). Collective.
  virtual void synchronize() {}
  // The engine, or nullptr for the plain-LibTorch reference.
  virtual engine::ZeroEngine* engine() { return nullptr; }
};

// The zoff engine over `module` (sharded, offloaded, as `cfg` says).
std::unique_ptr<Stepper> make_engine_stepper(std::shared_ptr<torch::nn::Module> module,
                                             const config::Config& cfg, dist::CommPtr comm,
                                             const engine::EngineOptions& options);

// Plain LibTorch: module->parameters(), torch::optim, clip_grad_norm_. No zoff engine.
// Throws zoff::UsageError on an optimizer type LibTorch has no class for.
std::unique_ptr<Stepper> make_reference_stepper(std::shared_ptr<torch::nn::Module> module,
                                                const config::Config& cfg);

}  // namespace zoff::train
