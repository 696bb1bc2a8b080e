// FlatLayout: reverse-registration-order packing, equal shards, greedy buckets.
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

std::vector<Bucket> FlatLayout::buckets(int64_t bucket_elems) const {
  ZOFF_CHECK_ARG(bucket_elems > 0, "bucket size ", bucket_elems, " must be > 0 elements");
  std::vector<Bucket> out;
  Bucket current;
  auto close = [&](int64_t end) {
    current.size = end - current.offset;
    current.pieces.assign(static_cast<size_t>(world_size_), 0);
    for (int r = 0; r < world_size_; ++r) {
      const Shard s = shard(r);
      const int64_t lo = std::max(s.offset, current.offset);
      const int64_t hi = std::min(s.end(), end);
      current.pieces[static_cast<size_t>(r)] = std::max<int64_t>(0, hi - lo);
    }
    out.push_back(current);
    current = Bucket{};
    current.offset = end;
  };
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto& slot = slots_[i];
    const int64_t filled = slot.offset - current.offset;
    if (!current.slots.empty() && filled + slot.numel > bucket_elems) close(slot.offset);
    current.slots.push_back(i);
  }
  close(padded_numel_);
  return out;
}

}  // namespace zoff::partition
