// FlatLayout: reverse-registration-order packing and equal shards.
#include "zoff/partition/flat_layout.h"

#include <algorithm>

#include "zoff/core/error.h"

namespace zoff::partition {

FlatLayout::FlatLayout(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
                       int world_size)
    : world_size_(world_size) {
  ZOFF_CHECK_ARG(world_size >= 1, "world size ", world_size, " must be >= 1");
  int64_t offset = 0;
  for (size_t i = named_params.size(); i-- > 0;) {
    const auto& [name, tensor] = named_params[i];
    ParamSlot slot;
    slot.name = name;
    slot.offset = offset;
    slot.numel = tensor.numel();
    slot.shape = tensor.sizes().vec();
    slot.module_index = i;
    offset += slot.numel;
    slots_.push_back(std::move(slot));
  }
  numel_ = offset;
  ZOFF_CHECK_ARG(numel_ > 0, "the module has no trainable parameters");
  padded_numel_ = (numel_ + world_size - 1) / world_size * world_size;
}

Shard FlatLayout::shard(int rank) const {
  ZOFF_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " outside world of ", world_size_);
  const int64_t size = shard_size();
  return Shard{rank * size, size};
}

}  // namespace zoff::partition
