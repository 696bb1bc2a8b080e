// The seam between a model's forward and whoever owns its parameters (the stage-3 engine).
#pragma once

#include <torch/torch.h>

namespace zoff::unit {

// What runs around one unit's computation. LibTorch's C++ nn::Module has no forward hooks,
// so models call zoff::with_unit / zoff::unit_forward (unit_call.h), which call these.
// An engine installs itself for every module of the model it owns; a module nobody
// installed hooks for runs its forward unchanged (plain LibTorch, reference runs, tests).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // Before `module`'s computation: its parameters must be whole (stage 3: gather them).
  virtual void before_forward(const torch::nn::Module& module) = 0;
  // After it (also when it threw): they may be released.
  virtual void after_forward(const torch::nn::Module& module) = 0;
  // When backward reaches the output of that computation, before the module's own
  // backward runs: its parameters must be whole again.
  virtual void before_backward(const torch::nn::Module& module) = 0;
};

// Installs `hooks` for `root` and every module below it; the caller keeps `hooks` alive
// until remove_hooks(root). Installing over another owner's hooks is an error.
void install_hooks(torch::nn::Module& root, UnitHooks* hooks);
// Removes what install_hooks(root, ...) installed (a no-op for modules it never saw).
void remove_hooks(torch::nn::Module& root);
// The hooks installed for `module`, or nullptr.
UnitHooks* hooks_for(const torch::nn::Module& module);

}  // namespace zoff::unit
