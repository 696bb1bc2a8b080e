// checkpoint(): a custom autograd function that recomputes its forward in backward.
#include "zoff/unit/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/engine.h>

#include <mutex>
#include <utility>

#include "zoff/core/error.h"

namespace zoff {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using CheckpointedFn = std::function<torch::Tensor(const torch::Tensor&)>;

// What backward needs besides the input: the function, and the RNG state forward saw.
struct CheckpointState : torch::CustomClassHolder {
  CheckpointedFn fn;
  torch::Tensor rng_state;  // the default CPU generator's state (uint8 bytes)
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

// Puts back the RNG state of its construction when it goes out of scope, also when the
// recomputation throws: code after backward draws as if nothing had been recomputed.
class RngStateRestorer {
 public:
  RngStateRestorer() : state_(get_rng_state()) {}
  ~RngStateRestorer() { set_rng_state(state_); }
  RngStateRestorer(const RngStateRestorer&) = delete;
  RngStateRestorer& operator=(const RngStateRestorer&) = delete;

 private:
  torch::Tensor state_;
};

torch::Tensor checked_output(torch::Tensor out) {
  ZOFF_CHECK_ARG(
      out.defined(),
      "zoff::activation_checkpoint: the checkpointed function returned an undefined tensor");
  return out;
}

// Inputs: the checkpointed tensor, and `anchor`, a 0-element tensor that requires grad when
// the input does not. LibTorch gives a custom function's output a grad_fn only when an
// input tensor requires grad, and it cannot see the parameters fn reads; without the
// anchor, a block whose input is a constant (token ids, data) would lose its parameters'
// gradients silently. The anchor's own gradient is never computed.
struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& anchor,
                               const c10::intrusive_ptr<CheckpointState>& state) {
    state->rng_state = get_rng_state();
    torch::Tensor out;
    {
      torch::NoGradGuard no_grad;  // the point: no activations kept
      out = checked_output(state->fn(input));
    }
    ctx->save_for_backward({input});
    ctx->saved_data["state"] =
        c10::IValue::make_capsule(c10::intrusive_ptr<torch::CustomClassHolder>(state));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The recomputation's backward accumulates into every leaf it reaches: an outer
    // torch::autograd::grad, or backward with `inputs`, would get wrong .grad elsewhere.
    ZOFF_CHECK_ARG(torch::autograd::Engine::get_default_engine().is_checkpoint_valid(),
                   "zoff::activation_checkpoint: backward through a checkpoint must be a plain "
                   "tensor.backward() (not torch::autograd::grad, nor backward with `inputs`)");
    auto* state = static_cast<CheckpointState*>(ctx->saved_data["state"].toCapsule().get());
    // A fresh leaf: the recomputed graph ends here, and its .grad is the input's gradient.
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(ctx->needs_input_grad(0));
    {
      RngStateRestorer restorer;
      set_rng_state(state->rng_state);  // the same dropout masks as in forward
      torch::AutoGradMode grad_on(true);
      const torch::Tensor out = checked_output(state->fn(x));
      // A re-entrant backward: runs now, on this thread, nested in the outer one.
      if (out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    }
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }
};

thread_local int checkpointed_forwards = 0;  // nested checkpoints' forwards on this thread

struct CheckpointedForwardScope {
  CheckpointedForwardScope() { ++checkpointed_forwards; }
  ~CheckpointedForwardScope() { --checkpointed_forwards; }
  CheckpointedForwardScope(const CheckpointedForwardScope&) = delete;
  CheckpointedForwardScope& operator=(const CheckpointedForwardScope&) = delete;
};
}  // namespace

bool in_checkpointed_forward() { return checkpointed_forwards > 0; }

torch::Tensor activation_checkpoint(CheckpointedFn fn, const torch::Tensor& input) {
  ZOFF_CHECK_ARG(static_cast<bool>(fn), "zoff::activation_checkpoint: the function is empty");
  ZOFF_CHECK_ARG(input.defined(), "zoff::activation_checkpoint: the input tensor is undefined");
  if (!torch::GradMode::is_enabled()) return checked_output(fn(input));
  auto state = c10::make_intrusive<CheckpointState>();
  state->fn = std::move(fn);
  const auto anchor = torch::empty({0}).requires_grad_(!input.requires_grad());
  const CheckpointedForwardScope scope;  // forward only: backward's recomputation runs elsewhere
  return CheckpointFunction::apply(input, anchor, state);
}

}  // namespace zoff
