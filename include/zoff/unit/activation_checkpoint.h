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
// state is put back: dropout masks match, parameter gradients accumulate into .grad exactly
// as without checkpointing, and later code draws the same random numbers as without it.
// With grad mode off (evaluation) it is just fn(input).
//
// Units: when fn runs a zoff unit (zoff::with_unit), the unit's hooks run twice per step.
// In forward: before_forward, after_forward (no before_backward: nothing there needs
// grad). In backward, when the gradient reaches the result: before_forward and
// after_forward again around the recomputation (a stage-3 engine gathers the unit again
// and, being in backward, keeps it whole), then before_backward from the recomputed
// output's gradient, then the unit's parameter gradients.
//
// Unlike the re-entrant torch.utils.checkpoint, the result requires grad whenever grad
// mode is on, even if `input` does not (token ids, a frozen prefix): fn's parameters may.
// If nothing in fn requires grad either, backward through it computes nothing.
// Limits: `fn` is called again in backward, so it must not capture references that die
// before; fn must not modify `input` in place; backward must be a plain
// tensor.backward() (torch::autograd::grad, or backward with `inputs`, is a UsageError,
// because the recomputation accumulates into every .grad it reaches). The CPU generator
// is process-wide: threads that draw random numbers while another one backpropagates
// through a checkpoint may have their draws repeated when the generator is put back.
torch::Tensor activation_checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn,
                                    const torch::Tensor& input);

// True on this thread while an activation_checkpoint's forward runs its function with
// grad mode turned off for the checkpoint only (gradients are on outside it, so a backward
// follows): a stage-3 gatherer reads ahead for that backward, as without checkpointing.
bool in_checkpointed_forward();

// checkpoint() of module->forward(x) as one unit. `module` is a ModuleHolder (copied: it
// must outlive backward).
template <typename Holder>
torch::Tensor checkpointed_unit_forward(Holder module, const torch::Tensor& input) {
  return activation_checkpoint(
      [module](const torch::Tensor& x) mutable { return unit_forward(module, x); }, input);
}

}  // namespace zoff
