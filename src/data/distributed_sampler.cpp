// Per-epoch shuffles cut into global batches and per-rank micro-batches.
#include "zoff/data/distributed_sampler.h"

#include <numeric>

#include "zoff/core/error.h"
#include "zoff/data/splitmix64.h"

namespace zoff::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t global_batch_size,
                                       uint64_t seed)
    : dataset_size_(dataset_size), global_batch_size_(global_batch_size), seed_(seed) {
  ZOFF_CHECK_ARG(global_batch_size >= 1, "sampler: global batch size = ", global_batch_size,
                 ": must be >= 1");
  ZOFF_CHECK_ARG(dataset_size >= global_batch_size, "sampler: dataset of ", dataset_size,
                 " samples is smaller than one global batch of ", global_batch_size);
  steps_per_epoch_ = dataset_size / global_batch_size;
}

int64_t DistributedSampler::epoch_of(int64_t step) const {
  ZOFF_CHECK_ARG(step >= 0, "sampler: step = ", step, ": must be >= 0");
  return step / steps_per_epoch_;
}

std::vector<int64_t> DistributedSampler::epoch_permutation(int64_t epoch) const {
  ZOFF_CHECK_ARG(epoch >= 0, "sampler: epoch = ", epoch, ": must be >= 0");
  std::lock_guard<std::mutex> lock(mutex_);
  return permutation_locked(epoch);
}

const std::vector<int64_t>& DistributedSampler::permutation_locked(int64_t epoch) const {
  if (epoch == cached_epoch_) return cached_permutation_;
  std::vector<int64_t>& perm = cached_permutation_;
  perm.resize(static_cast<size_t>(dataset_size_));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  // Fisher-Yates from the back: position i swaps with a uniform position in [0, i].
  SplitMix64 rng(SplitMix64::derive(seed_, static_cast<uint64_t>(epoch)));
  for (int64_t i = dataset_size_ - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
  }
  cached_epoch_ = epoch;
  return perm;
}

std::vector<int64_t> DistributedSampler::global_batch(int64_t step) const {
  const int64_t epoch = epoch_of(step);
  const int64_t begin = (step % steps_per_epoch_) * global_batch_size_;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<int64_t>& perm = permutation_locked(epoch);
  return std::vector<int64_t>(perm.begin() + begin, perm.begin() + begin + global_batch_size_);
}

std::vector<int64_t> DistributedSampler::micro_batch(int64_t step, int rank, int world_size,
                                                     int64_t micro_index,
                                                     int64_t micro_batch_size) const {
  ZOFF_CHECK_ARG(world_size >= 1, "sampler: world size = ", world_size, ": must be >= 1");
  ZOFF_CHECK_ARG(rank >= 0 && rank < world_size, "sampler: rank = ", rank, ": must be in [0, ",
                 world_size, ")");
  ZOFF_CHECK_ARG(micro_batch_size >= 1, "sampler: micro batch size = ", micro_batch_size,
                 ": must be >= 1");
  const int64_t per_round = micro_batch_size * world_size;  // samples per accumulation step
  ZOFF_CHECK_ARG(global_batch_size_ % per_round == 0, "sampler: global batch size ",
                 global_batch_size_, " is not micro batch ", micro_batch_size, " * accumulation",
                 " steps * world size ", world_size, " for any whole number of steps");
  const int64_t accum = global_batch_size_ / per_round;
  ZOFF_CHECK_ARG(micro_index >= 0 && micro_index < accum, "sampler: micro index = ", micro_index,
                 ": must be in [0, ", accum, ") (gradient accumulation steps)");
  const int64_t epoch = epoch_of(step);
  const int64_t begin = (step % steps_per_epoch_) * global_batch_size_ +
                        (micro_index * world_size + rank) * micro_batch_size;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::vector<int64_t>& perm = permutation_locked(epoch);
  return std::vector<int64_t>(perm.begin() + begin, perm.begin() + begin + micro_batch_size);
}

}  // namespace zoff::data
