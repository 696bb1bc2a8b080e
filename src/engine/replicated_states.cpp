// ReplicatedStates: casting, broadcasting and sizing the unpartitioned model states.
#include "zoff/engine/replicated_states.h"

namespace zoff::engine {
namespace {

size_t bytes_of(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  size_t bytes = 0;
  for (const auto& [name, t] : tensors) bytes += static_cast<size_t>(t.nbytes());
  return bytes;
}

}  // namespace

ReplicatedStates::ReplicatedStates(std::vector<std::pair<std::string, torch::Tensor>> frozen,
                                   std::vector<std::pair<std::string, torch::Tensor>> buffers,
                                   dist::CommPtr comm, torch::ScalarType compute_dtype)
    : frozen_(std::move(frozen)), buffers_(std::move(buffers)), comm_(std::move(comm)) {
  torch::NoGradGuard no_grad;
  for (auto* list : {&frozen_, &buffers_}) {
    for (auto& [name, t] : *list) {
      // set_data keeps the tensor the module registered; only its values change dtype.
      if (t.is_floating_point() && t.scalar_type() != compute_dtype) {
        t.set_data(t.detach().to(compute_dtype));
      } else if (!t.is_contiguous()) {
        t.set_data(t.detach().contiguous());
      }
    }
  }
}

void ReplicatedStates::broadcast(const std::vector<std::pair<std::string, torch::Tensor>>& list) {
  if (comm_->size() == 1) return;
  torch::NoGradGuard no_grad;
  std::vector<dist::WorkPtr> works;
  // The transports move host memory: a tensor on an accelerator goes through a host copy.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> bounced;  // (device tensor, host copy)
  for (const auto& [name, t] : list) {
    if (t.numel() == 0) continue;
    torch::Tensor wire = t.detach();
    if (!t.is_cpu()) {
      wire = wire.to(torch::kCPU);
      bounced.emplace_back(t.detach(), wire);
    }
    works.push_back(comm_->broadcast(wire, 0));
  }
  for (auto& w : works) w->wait();
  for (auto& [device_tensor, host] : bounced) device_tensor.copy_(host);
}

void ReplicatedStates::broadcast_from_rank0() {
  broadcast(frozen_);
  broadcast(buffers_);
}

void ReplicatedStates::broadcast_buffers() { broadcast(buffers_); }

std::vector<std::pair<std::string, torch::Tensor>> ReplicatedStates::all() const {
  auto out = frozen_;
  out.insert(out.end(), buffers_.begin(), buffers_.end());
  return out;
}

size_t ReplicatedStates::frozen_bytes() const { return bytes_of(frozen_); }
size_t ReplicatedStates::buffer_bytes() const { return bytes_of(buffers_); }

}  // namespace zoff::engine
