// TorchFusedAdamW / TorchFusedAdam: torch::optim's Adam classes stepped by ATen's fused kernels.
#include "zoff/optim/torch_fused_adam.h"

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::optim {
namespace {

// The parameters of one group that have gradients, with their (created on first use)
// states; state_steps are the fused kernel's fp32 step counts, already advanced.
struct FusedArgs {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

template <class State>
FusedArgs collect(torch::optim::Optimizer& optimizer, torch::optim::OptimizerParamGroup& group) {
  FusedArgs a;
  for (auto& p : group.params()) {
    if (!p.grad().defined()) continue;
    auto& slot = optimizer.state()[p.unsafeGetTensorImpl()];
    if (!slot) {
      auto s = std::make_unique<State>();
      s->step(0);
      s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      slot = std::move(s);
    }
    auto& s = static_cast<State&>(*slot);
    s.step(s.step() + 1);
    a.params.push_back(p);
    a.grads.push_back(p.grad());
    a.exp_avgs.push_back(s.exp_avg());
    a.exp_avg_sqs.push_back(s.exp_avg_sq());
    a.steps.push_back(torch::full({}, static_cast<double>(s.step()), torch::kFloat32));
  }
  return a;
}

template <class Options, class State, class Kernel>
torch::Tensor fused_step(torch::optim::Optimizer& optimizer,
                         const torch::optim::Optimizer::LossClosure& closure, Kernel kernel) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = closure ? closure() : torch::Tensor();
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const Options&>(group.options());
    ZOFF_CHECK_ARG(!o.amsgrad(), "optimizer: amsgrad is not supported");
    FusedArgs a = collect<State>(optimizer, group);
    if (a.params.empty()) continue;
    kernel(a, o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps());
  }
  return loss;
}

}  // namespace

torch::Tensor TorchFusedAdamW::step(LossClosure closure) {
  return fused_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      *this, closure, [](FusedArgs& a, double lr, double b1, double b2, double wd, double eps) {
        at::_fused_adamw_(a.params, a.grads, a.exp_avgs, a.exp_avg_sqs, {}, a.steps, lr, b1, b2, wd,
                          eps, /*amsgrad=*/false, /*maximize=*/false);
      });
}

torch::Tensor TorchFusedAdam::step(LossClosure closure) {
  return fused_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(
      *this, closure, [](FusedArgs& a, double lr, double b1, double b2, double wd, double eps) {
        at::_fused_adam_(a.params, a.grads, a.exp_avgs, a.exp_avg_sqs, {}, a.steps, lr, b1, b2, wd,
                         eps, /*amsgrad=*/false, /*maximize=*/false);
      });
}

}  // namespace zoff::optim
