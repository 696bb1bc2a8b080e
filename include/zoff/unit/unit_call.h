// The one line a model writes per parameter unit: run a module's computation as a unit.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <utility>

namespace zoff {

// Runs fn() as a computation of `module`'s parameters: under a stage-3 engine they are
// gathered before, released after, and gathered again before the backward of fn's result.
// Use it for any computation that reads the module's parameters, its own forward or not
// (a tied lm head reading the embedding's weight). Without an engine it just calls fn().
// fn returns one tensor; it may be called again (activation checkpointing recomputes it).
torch::Tensor with_unit(torch::nn::Module& module, const std::function<torch::Tensor()>& fn);

// module->forward(args...) as one unit: `x = zoff::unit_forward(block, x);`
// `module` is a ModuleHolder (torch::nn::Linear, a TORCH_MODULE) or a shared_ptr.
template <typename Holder, typename... Args>
torch::Tensor unit_forward(Holder& module, Args&&... args) {
  return with_unit(*module, [&] { return module->forward(std::forward<Args>(args)...); });
}

}  // namespace zoff
