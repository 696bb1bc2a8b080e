// Where every trainable parameter of a model lives: units, each with its own flat layout,
// concatenated into one flat buffer, and the piece of every unit each rank owns.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zoff/partition/flat_layout.h"

namespace zoff::partition {

// A unit as planned: a name (its module path) and the parameters it gathers together, as
// indices into the model's list of trainable parameters.
struct UnitSpec {
  std::string name;
  std::vector<size_t> params;
};

// A unit in the flat buffer. With sharding (stages 1-3) it is padded to a multiple of the
// world size and rank r owns its elements [offset + r * shard_size, + shard_size): every
// rank owns 1/N of every unit, so gathering a unit is a balanced all-gather. Without
// sharding (stage 0) it is unpadded and shard_size is 0.
struct LayoutUnit {
  std::string name;
  std::vector<size_t> slots;  // indices into ModelLayout::slots(), in buffer order
  int64_t offset = 0;         // elements: the unit's start in the model's flat buffer
  int64_t numel = 0;          // parameter elements (without padding)
  int64_t padded_numel = 0;   // elements it takes in the flat buffer
  int64_t shard_size = 0;     // elements each rank owns (0 without sharding)
  int64_t shard_offset = 0;   // where this rank's piece starts in its shard space

  // Where rank r's piece of the unit starts in the flat buffer, in elements.
  int64_t piece_offset(int64_t rank) const { return offset + rank * shard_size; }
};

// A rank's shard space is the concatenation of its pieces of every region: elements
// [offset + r * shard_size, + shard_size) of the flat buffer are elements
// [shard_offset, + shard_size) of rank r's shard space. Sharded layouts have one region
// per unit; an unsharded one has a single region over the whole (padded) buffer, so a
// checkpoint of any stage splits the buffer the same way.
struct ShardRegion {
  int64_t offset = 0;
  int64_t padded_numel = 0;
  int64_t shard_size = 0;
  int64_t shard_offset = 0;
};

// Consecutive units (in buffer order) whose gradients are reduced in one collective:
// flat elements [offset, + size), shard-space elements [shard_offset, + shard_size).
struct UnitBucket {
  std::vector<size_t> units;  // unit indices, in buffer order
  int64_t offset = 0;
  int64_t size = 0;
  int64_t shard_offset = 0;
  int64_t shard_size = 0;
};

class ModelLayout {
 public:
  // `named` are the trainable parameters (each once); `units` partition their indices.
  // Units are laid out in *reverse* order (backward produces the last units' gradients
  // first, so the first buckets fill first), parameters within a unit likewise. The
  // unsharded buffer is padded at its end to a multiple of the world size.
  ModelLayout(const std::vector<std::pair<std::string, torch::Tensor>>& named,
              const std::vector<UnitSpec>& units, int world_size, bool shard_units);

  const std::vector<LayoutUnit>& units() const { return units_; }     // in plan order
  const std::vector<size_t>& buffer_order() const { return order_; }  // unit indices
  const std::vector<ParamSlot>& slots() const { return slots_; }      // global offsets
  const std::vector<ShardRegion>& regions() const { return regions_; }
  size_t unit_of_slot(size_t slot) const { return slot_unit_[slot]; }
  bool sharded() const { return sharded_; }
  int world_size() const { return world_size_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  // Elements of one rank's shard space (the same on every rank).
  int64_t shard_size() const { return padded_numel_ / world_size_; }

  // Greedy groups of consecutive units of at most `bucket_elems` flat elements (a larger
  // unit gets a bucket of its own); the last bucket also covers the unsharded padding.
  std::vector<UnitBucket> buckets(int64_t bucket_elems) const;
  // One bucket per unit (stage 3 reduces each unit as soon as its backward is done).
  std::vector<UnitBucket> unit_buckets() const;

 private:
  UnitBucket bucket_of(const std::vector<size_t>& units, bool last) const;

  std::vector<LayoutUnit> units_;
  std::vector<size_t> order_;
  std::vector<ParamSlot> slots_;
  std::vector<size_t> slot_unit_;
  std::vector<ShardRegion> regions_;
  bool sharded_ = false;
  int world_size_ = 1;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
};

}  // namespace zoff::partition
