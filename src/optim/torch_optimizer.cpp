// make_torch_optimizer: OptimizerOptions to LibTorch's optimizer classes.
#include "zoff/optim/torch_optimizer.h"

#include <utility>

#include "zoff/core/error.h"
#include "zoff/optim/torch_fused_adam.h"

namespace zoff::optim {

std::unique_ptr<torch::optim::Optimizer> make_torch_optimizer(std::vector<torch::Tensor> params,
                                                              const OptimizerOptions& o) {
  namespace to = torch::optim;
  if (o.type == "adamw") {
    return std::make_unique<to::AdamW>(
        std::move(params),
        to::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  }
  if (o.type == "adam") {
    return std::make_unique<to::Adam>(
        std::move(params),
        to::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  }
  if (o.type == "sgd") {
    return std::make_unique<to::SGD>(std::move(params), to::SGDOptions(o.lr)
                                                            .momentum(o.momentum)
                                                            .dampening(o.dampening)
                                                            .weight_decay(o.weight_decay)
                                                            .nesterov(o.nesterov));
  }
  if (o.type == "adagrad") {
    return std::make_unique<to::Adagrad>(std::move(params),
                                         to::AdagradOptions(o.lr)
                                             .lr_decay(o.lr_decay)
                                             .weight_decay(o.weight_decay)
                                             .initial_accumulator_value(o.initial_accumulator_value)
                                             .eps(o.eps));
  }
  throw UsageError("optimizer.type = " + o.type + ": unknown");
}

std::unique_ptr<torch::optim::Optimizer> make_torch_fused_optimizer(
    std::vector<torch::Tensor> params, const OptimizerOptions& o) {
  namespace to = torch::optim;
  if (o.type == "adamw") {
    return std::make_unique<TorchFusedAdamW>(
        std::move(params),
        to::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  }
  if (o.type == "adam") {
    return std::make_unique<TorchFusedAdam>(
        std::move(params),
        to::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  }
  return make_torch_optimizer(std::move(params), o);
}

}  // namespace zoff::optim
