// Where every parameter lives in one flat buffer, and which contiguous range each rank owns.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zoff::partition {

// A rank's share of a flat buffer: elements [offset, offset + size).
struct Shard {
  int64_t offset = 0;
  int64_t size = 0;
  int64_t end() const { return offset + size; }
};

// One parameter's place in the flat buffer.
struct ParamSlot {
  std::string name;    // as in Module::named_parameters()
  int64_t offset = 0;  // elements from the start of the flat buffer
  int64_t numel = 0;
  std::vector<int64_t> shape;
  size_t module_index = 0;  // position in Module::named_parameters()
};

// The layout of a module's trainable parameters in one flat buffer. Parameters are laid
// out in *reverse* registration order: backward produces the gradients of the last layers
// first, so the first buckets fill first and their communication starts early. The buffer
// is padded with zeros to a multiple of the world size so every rank owns an equal shard
// (padded_numel / world_size elements).
class FlatLayout {
 public:
  FlatLayout(const std::vector<std::pair<std::string, torch::Tensor>>& named_params,
             int world_size);

  const std::vector<ParamSlot>& slots() const { return slots_; }
  int64_t numel() const { return numel_; }
  int64_t padded_numel() const { return padded_numel_; }
  int world_size() const { return world_size_; }
  int64_t shard_size() const { return padded_numel_ / world_size_; }
  Shard shard(int rank) const;

 private:
  std::vector<ParamSlot> slots_;
  int64_t numel_ = 0;
  int64_t padded_numel_ = 0;
  int world_size_ = 1;
};

}  // namespace zoff::partition
