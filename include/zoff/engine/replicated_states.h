// Frozen parameters and module buffers: whole on every rank, kept equal across ranks.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "zoff/dist/comm.h"

namespace zoff::engine {

// What ZeRO does not partition: parameters with requires_grad = false (a frozen
// embedding) and module buffers (BatchNorm's running statistics and batch count). Every
// rank starts from rank 0's values, and after every optimizer step rank 0's buffers are
// broadcast again (DDP's broadcast_buffers semantics: ranks see different micro-batches,
// so their running statistics drift apart; rank 0's win). Floating ones are cast to the
// compute dtype, since the module computes with them next to 16-bit parameters.
class ReplicatedStates {
 public:
  ReplicatedStates(std::vector<std::pair<std::string, torch::Tensor>> frozen,
                   std::vector<std::pair<std::string, torch::Tensor>> buffers, dist::CommPtr comm,
                   torch::ScalarType compute_dtype);

  // Rank 0's values on every rank (collective; every rank calls it equally often).
  void broadcast_from_rank0();
  // Only the buffers (what changes during training).
  void broadcast_buffers();

  const std::vector<std::pair<std::string, torch::Tensor>>& frozen() const { return frozen_; }
  const std::vector<std::pair<std::string, torch::Tensor>>& buffers() const { return buffers_; }
  // Frozen parameters, then buffers: the order checkpoints store them in.
  std::vector<std::pair<std::string, torch::Tensor>> all() const;
  size_t frozen_bytes() const;
  size_t buffer_bytes() const;

 private:
  void broadcast(const std::vector<std::pair<std::string, torch::Tensor>>& tensors);

  std::vector<std::pair<std::string, torch::Tensor>> frozen_;
  std::vector<std::pair<std::string, torch::Tensor>> buffers_;
  dist::CommPtr comm_;
};

}  // namespace zoff::engine
