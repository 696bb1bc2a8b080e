// The dataset interface every training loop reads from: a fixed number of samples fetched
// as stacked batches by sample index.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace zoff::data {

// One stacked batch: inputs[i] and targets[i] belong to the i-th requested sample.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
};

// A dataset with `size()` samples numbered 0..size()-1. get() is deterministic: the same
// indices always give bitwise the same batch, whatever else was fetched before and
// whatever other indices share the batch, so every rank can fetch its own slice.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Stacks the samples `indices` (each in [0, size())) along a new leading batch dimension.
  // An index out of range throws zoff::UsageError naming it.
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
};

}  // namespace zoff::data
