// The delayed parameter update (ZeRO-Offload's DPU): step t's optimizer pass runs in the
// background while step t + 1's forward and backward compute on the parameters before it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <future>

namespace zoff::engine {

// Owns what the background pass reads and writes, so the engine's own buffers stay free for
// the next micro-batches: a copy of the step's gradients (the reducer refills its buffer)
// and the 16-bit (or fp32) values the pass writes aside (the module reads the current ones
// meanwhile).
class DelayedUpdate {
 public:
  // `numel` fp32 gradient elements (like `grads_like`) and as many output elements of `dtype`.
  DelayedUpdate(const torch::Tensor& grads_like, torch::ScalarType dtype);
  // Waits for a pass still running (its error, if any, is dropped: the engine is going).
  ~DelayedUpdate();

  // Copies `grads` and runs update(grads copy, output) on a thread of its own.
  void launch(const torch::Tensor& grads,
              std::function<void(const torch::Tensor& grads, const torch::Tensor& out)> update);
  bool pending() const { return pending_.valid(); }
  // Waits for the pass (rethrowing what it threw) and returns the values it wrote.
  const torch::Tensor& wait();

 private:
  torch::Tensor grads_;
  torch::Tensor out_;
  std::future<void> pending_;
};

}  // namespace zoff::engine
