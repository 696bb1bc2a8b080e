// The delayed parameter update: the optimizer pass of one step in the background.
#include "zoff/engine/delayed_update.h"

#include <utility>

namespace zoff::engine {

DelayedUpdate::DelayedUpdate(const torch::Tensor& grads_like, torch::ScalarType dtype)
    : grads_(torch::empty({grads_like.numel()}, grads_like.options())),
      out_(torch::empty({grads_like.numel()}, torch::TensorOptions().dtype(dtype))) {}

DelayedUpdate::~DelayedUpdate() {
  if (pending_.valid()) pending_.wait();
}

void DelayedUpdate::launch(
    const torch::Tensor& grads,
    std::function<void(const torch::Tensor& grads, const torch::Tensor& out)> update) {
  grads_.copy_(grads);
  pending_ =
      std::async(std::launch::async, [this, update = std::move(update)] { update(grads_, out_); });
}

const torch::Tensor& DelayedUpdate::wait() {
  pending_.get();  // rethrows what the update threw
  return out_;
}

}  // namespace zoff::engine
