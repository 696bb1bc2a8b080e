// with_unit: the hooks around one unit's computation and the pre-backward gather.
#include "zoff/unit/unit_call.h"

#include "zoff/unit/unit_hooks.h"

namespace zoff {

torch::Tensor with_unit(torch::nn::Module& module, const std::function<torch::Tensor()>& fn) {
  unit::UnitHooks* hooks = unit::hooks_for(module);
  if (hooks == nullptr) return fn();
  hooks->before_forward(module);
  torch::Tensor out;
  try {
    out = fn();
  } catch (...) {
    hooks->after_forward(module);
    throw;
  }
  hooks->after_forward(module);
  // The gradient of the output arrives before any backward node of the unit runs: the
  // moment to have the parameters whole again (what FSDP's pre-backward hook does).
  if (out.defined() && out.requires_grad()) {
    // A hook on a leaf (fn returned a parameter itself) would stay for good: hook a view.
    if (out.is_leaf()) out = out.view_as(out);
    const torch::nn::Module* m = &module;
    out.register_hook([hooks, m](const torch::Tensor& grad) {
      hooks->before_backward(*m);
      return grad;
    });
  }
  return out;
}

}  // namespace zoff
