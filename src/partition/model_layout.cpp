// ModelLayout: units in reverse order, per-unit padding and shards, regions, unit buckets.
#include "zoff/partition/model_layout.h"

#include <algorithm>

#include "zoff/core/error.h"

namespace zoff::partition {

ModelLayout::ModelLayout(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                         const std::vector<UnitSpec>& units, int world_size, bool shard_units)
    : sharded_(shard_units), world_size_(world_size) {
  ZOFF_CHECK_ARG(world_size >= 1, "world size ", world_size, " must be >= 1");
  ZOFF_CHECK_ARG(!named.empty(), "the module has no trainable parameters");
  std::vector<int> owner(named.size(), -1);
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t p : units[u].params) {
      ZOFF_CHECK(p < named.size() && owner[p] < 0, "unit plan: parameter ", p,
                 " is missing or in two units");
      owner[p] = static_cast<int>(u);
    }
  }
  for (size_t p = 0; p < named.size(); ++p) {
    ZOFF_CHECK(owner[p] >= 0, "unit plan: parameter ", named[p].first, " is in no unit");
  }
  slot_unit_.assign(named.size(), 0);
  units_.resize(units.size());
  int64_t offset = 0, shard_offset = 0;
  for (size_t k = units.size(); k-- > 0;) {
    const auto& spec = units[k];
    auto& unit = units_[k];
    unit.name = spec.name;
    unit.offset = offset;
    // Parameters in reverse order inside the unit too.
    for (size_t i = spec.params.size(); i-- > 0;) {
      const auto& [name, tensor] = named[spec.params[i]];
      ParamSlot slot{name, offset + unit.numel, tensor.numel(), tensor.sizes().vec(),
                     spec.params[i]};
      unit.numel += slot.numel;
      unit.slots.push_back(slots_.size());
      slot_unit_[slots_.size()] = k;
      slots_.push_back(std::move(slot));
    }
    const int64_t pad_to = shard_units ? world_size : 1;
    unit.padded_numel = (unit.numel + pad_to - 1) / pad_to * pad_to;
    if (shard_units) {
      unit.shard_size = unit.padded_numel / world_size;
      unit.shard_offset = shard_offset;
      regions_.push_back({unit.offset, unit.padded_numel, unit.shard_size, shard_offset});
      shard_offset += unit.shard_size;
    }
    offset += unit.padded_numel;
    numel_ += unit.numel;
    order_.push_back(k);
  }
  slot_unit_.resize(slots_.size());
  padded_numel_ = (offset + world_size - 1) / world_size * world_size;
  if (!shard_units) regions_.push_back({0, padded_numel_, padded_numel_ / world_size, 0});
}

UnitBucket ModelLayout::bucket_of(const std::vector<size_t>& units, bool last) const {
  UnitBucket b;
  b.units = units;
  const auto& first = units_[units.front()];
  b.offset = first.offset;
  b.shard_offset = first.shard_offset;
  for (size_t u : units) {
    b.size += units_[u].padded_numel;
    b.shard_size += units_[u].shard_size;
  }
  if (last) b.size = padded_numel_ - b.offset;  // the unsharded tail padding
  return b;
}

std::vector<UnitBucket> ModelLayout::buckets(int64_t bucket_elems) const {
  ZOFF_CHECK_ARG(bucket_elems > 0, "bucket size ", bucket_elems, " must be > 0 elements");
  std::vector<UnitBucket> out;
  std::vector<size_t> current;
  int64_t filled = 0;
  for (size_t u : order_) {
    const int64_t n = units_[u].padded_numel;
    if (!current.empty() && filled + n > bucket_elems) {
      out.push_back(bucket_of(current, false));
      current.clear();
      filled = 0;
    }
    current.push_back(u);
    filled += n;
  }
  out.push_back(bucket_of(current, true));
  return out;
}

std::vector<UnitBucket> ModelLayout::unit_buckets() const {
  std::vector<UnitBucket> out;
  for (size_t i = 0; i < order_.size(); ++i) {
    out.push_back(bucket_of({order_[i]}, i + 1 == order_.size()));
  }
  return out;
}

}  // namespace zoff::partition
