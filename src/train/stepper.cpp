// The engine and plain-LibTorch Steppers of run_training.
#include "stepper.h"

#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "zoff/config/lr_schedule.h"
#include "zoff/core/error.h"
#include "zoff/optim/torch_optimizer.h"

namespace zoff::train {
namespace {

using Clock = std::chrono::steady_clock;
using engine::ms_since;

class EngineStepper : public Stepper {
 public:
  EngineStepper(std::shared_ptr<torch::nn::Module> module, const config::Config& cfg,
                dist::CommPtr comm, engine::EngineOptions opts)
      : engine_(std::move(module), cfg, std::move(comm), opts) {}
  void backward(const torch::Tensor& loss) override { engine_.backward(loss); }
  void synchronize() override { engine_.synchronize(); }
  engine::ZeroEngine* engine() override { return &engine_; }
  engine::StepStats step() override { return engine_.step(); }
  engine::MemoryStats memory() const override { return engine_.memory(); }

 private:
  engine::ZeroEngine engine_;
};

// Plain LibTorch: model->parameters(), torch::optim (Adam/AdamW by ATen's fused kernel, as
// torch.optim's fused=True), clip_grad_norm_. No zoff engine.
class ReferenceStepper : public Stepper {
 public:
  ReferenceStepper(std::shared_ptr<torch::nn::Module> module, const config::Config& cfg)
      : module_(std::move(module)), cfg_(cfg), params_(module_->parameters()) {
    const auto& o = cfg.optimizer;
    int64_t numel = 0;
    for (auto& p : params_) numel += p.numel();
    optimizer_ = optim::make_torch_fused_optimizer(params_, o);
    const int states = optim::optimizer_state_count(o);  // fp32 each
    mem_.compute.params = static_cast<size_t>(numel) * 4;
    mem_.compute.grads = static_cast<size_t>(numel) * 4;
    mem_.compute.optim = static_cast<size_t>(numel) * 4 * static_cast<size_t>(states);
  }
  void backward(const torch::Tensor& loss) override {
    const auto start = Clock::now();
    (loss / static_cast<double>(cfg_.gradient_accumulation_steps)).backward();
    backward_ms_ += ms_since(start);
  }
  engine::StepStats step() override {
    const auto start = Clock::now();
    engine::StepStats s;
    s.times.backward_ms = std::exchange(backward_ms_, 0.0);
    double sq = 0;
    for (auto& p : params_) {
      if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).square().sum().item<double>();
    }
    s.grad_norm = std::sqrt(sq);
    if (cfg_.gradient_clipping > 0) {
      torch::nn::utils::clip_grad_norm_(params_, cfg_.gradient_clipping);
    }
    s.times.grad_norm_ms = ms_since(start);
    const auto update_start = Clock::now();
    s.lr = config::lr_at(cfg_.scheduler, cfg_.optimizer.lr, step_);
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(s.lr);
    optimizer_->step();
    optimizer_->zero_grad();
    s.times.optimizer_ms = ms_since(update_start);
    s.step = ++step_;
    s.times.step_ms = ms_since(start);
    return s;
  }
  engine::MemoryStats memory() const override { return mem_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  config::Config cfg_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  engine::MemoryStats mem_;
  int64_t step_ = 0;
  double backward_ms_ = 0.0;  // this step's backward calls so far
};

}  // namespace

std::unique_ptr<Stepper> make_engine_stepper(std::shared_ptr<torch::nn::Module> module,
                                             const config::Config& cfg, dist::CommPtr comm,
                                             const engine::EngineOptions& options) {
  return std::make_unique<EngineStepper>(std::move(module), cfg, std::move(comm), options);
}

std::unique_ptr<Stepper> make_reference_stepper(std::shared_ptr<torch::nn::Module> module,
                                                const config::Config& cfg) {
  return std::make_unique<ReferenceStepper>(std::move(module), cfg);
}

}  // namespace zoff::train
