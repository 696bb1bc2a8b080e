// LibTorch's own optimizer for zoff's OptimizerOptions: the reference the fused kernels are
// checked against (the torch backend, and `zoff train --reference`).
#pragma once

#include <torch/optim.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "zoff/optim/shard_optimizer.h"

namespace zoff::optim {

// torch::optim::AdamW, Adam, SGD or Adagrad over `params` with the options' hyper-parameters
// (its lr the initial one; callers set each step's). Throws zoff::UsageError naming an
// options.type LibTorch has no class for.
std::unique_ptr<torch::optim::Optimizer> make_torch_optimizer(std::vector<torch::Tensor> params,
                                                              const OptimizerOptions& options);

// The same, with Adam and AdamW stepped by ATen's fused CPU kernels (torch_fused_adam.h): the
// arithmetic of torch.optim's fused=True, which zoff's kernels follow bit for bit. The
// reference of `zoff train --reference`.
std::unique_ptr<torch::optim::Optimizer> make_torch_fused_optimizer(
    std::vector<torch::Tensor> params, const OptimizerOptions& options);

}  // namespace zoff::optim
