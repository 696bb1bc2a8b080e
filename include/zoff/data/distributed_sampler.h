// Which sample indices each rank reads at each step: a per-epoch shuffle shared by all
// ranks, cut into global batches and then into per-rank micro-batches.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace zoff::data {

// The sample order is a sequence of epochs; epoch e is a permutation of [0, dataset_size)
// drawn from (seed, e) by Fisher-Yates over SplitMix64 (integer-only, so it is identical on
// every rank, platform and compiler, and independent of LibTorch's RNG state).
//
// Global batch `step` is the (step % steps_per_epoch())-th run of global_batch_size indices
// of epoch epoch_of(step). The incomplete tail of each epoch (dataset_size % global_batch_size
// samples, different ones every epoch) is dropped, so every step has a full global batch.
//
// A global batch is split into accum * world_size micro-batches of micro_batch_size; rank r
// takes, for accumulation step m, the slice [(m * world_size + r) * micro, +micro). The
// global batch therefore depends only on (seed, global_batch_size, step): changing the world
// size (with micro * accum adjusted) changes who reads what, not what is read.
class DistributedSampler {
 public:
  // dataset_size >= global_batch_size >= 1, else zoff::UsageError naming the values.
  DistributedSampler(int64_t dataset_size, int64_t global_batch_size, uint64_t seed);

  int64_t dataset_size() const { return dataset_size_; }
  int64_t global_batch_size() const { return global_batch_size_; }
  // floor(dataset_size / global_batch_size) >= 1.
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  // step >= 0 (UsageError otherwise).
  int64_t epoch_of(int64_t step) const;

  // The full permutation of epoch `epoch` (dataset_size indices).
  std::vector<int64_t> epoch_permutation(int64_t epoch) const;
  // The global_batch_size indices of global batch `step`.
  std::vector<int64_t> global_batch(int64_t step) const;
  // This rank's micro-batch `micro_index` of global batch `step`. Requires
  // global_batch_size == micro_batch_size * accum * world_size for a whole accum >= 1,
  // 0 <= rank < world_size and 0 <= micro_index < accum; anything else is a UsageError
  // naming the values.
  std::vector<int64_t> micro_batch(int64_t step, int rank, int world_size, int64_t micro_index,
                                   int64_t micro_batch_size) const;

 private:
  // The permutation of `epoch`, cached for the most recent epoch (steps come in order).
  const std::vector<int64_t>& permutation_locked(int64_t epoch) const;

  int64_t dataset_size_;
  int64_t global_batch_size_;
  uint64_t seed_;
  int64_t steps_per_epoch_;
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_permutation_;
};

}  // namespace zoff::data
