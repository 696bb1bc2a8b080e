// Activation checkpointing: run a piece of forward without keeping its activations and
// recompute it in backward.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "zoff/unit/unit_call.h"

namespace zoff {

// Runs fn(input) under no-grad, keeping only `input` and the CPU RNG state. When backward
// reaches the result, the RNG state is restored, fn(input) is recomputed with grad on and
// backpropagated (a re-entrant backward, as torch.utils.checkpoint's default), and the RNG
// state is put back: dropout masks match, and parameter gradients accumulate into .grad
// exactly as without checkpointing. With grad mode off it is just fn(input).
// When fn runs a zoff unit (zoff::with_unit), the recomputation gathers the unit again
// under a stage-3 engine and keeps it whole until its gradients are out.
// `fn` is called again in backward: it must not capture references that die before.
// As in the re-entrant torch.utils.checkpoint, the result requires grad only when `input`
// does: checkpoint a block whose input comes from trainable layers (a transformer block).
torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn,
                         const torch::Tensor& input);

// checkpoint() of module->forward(x) as one unit. `module` is a ModuleHolder (copied: it
// must outlive backward).
template <typename Holder>
torch::Tensor checkpointed_unit_forward(Holder module, const torch::Tensor& input) {
  return checkpoint([module](const torch::Tensor& x) mutable { return unit_forward(module, x); },
                    input);
}

}  // namespace zoff
