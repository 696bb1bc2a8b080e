// checkpoint(): a custom autograd function that recomputes its forward in backward.
#include "zoff/unit/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include "zoff/core/error.h"

namespace zoff {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the input: the function, and the RNG state forward saw.
struct CheckpointState : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> fn;
  torch::Tensor rng_state;
  bool input_requires_grad = false;
};

torch::Tensor get_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(const torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input,
                               c10::intrusive_ptr<CheckpointState> state) {
    state->rng_state = get_rng_state();
    torch::Tensor out;
    {
      torch::NoGradGuard no_grad;
      out = state->fn(input);
    }
    ZOFF_CHECK_ARG(out.defined(), "zoff::checkpoint: the function returned an undefined tensor");
    ctx->save_for_backward({input});
    ctx->saved_data["state"] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(state));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto state = ctx->saved_data["state"].toCapsule();
    auto* st = static_cast<CheckpointState*>(state.get());
    const auto input = ctx->get_saved_variables()[0];
    auto x = input.detach().requires_grad_(st->input_requires_grad);
    const auto resume = get_rng_state();
    set_rng_state(st->rng_state);
    torch::Tensor out;
    try {
      torch::AutoGradMode grad_on(true);
      out = st->fn(x);
      if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    } catch (...) {
      set_rng_state(resume);
      throw;
    }
    set_rng_state(resume);
    return {st->input_requires_grad ? x.grad() : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> fn,
                         const torch::Tensor& input) {
  ZOFF_CHECK_ARG(input.defined(), "zoff::checkpoint: the input tensor is undefined");
  ZOFF_CHECK_ARG(static_cast<bool>(fn), "zoff::checkpoint: no function");
  if (!torch::GradMode::is_enabled()) return fn(input);
  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = std::move(fn);
  state->input_requires_grad = input.requires_grad();
  return CheckpointFunction::apply(input, state);
}

}  // namespace zoff
