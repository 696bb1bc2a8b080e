// A bounded window of per-sub-group fp32 gradient buffers, for a step that consumes each
// sub-group's gradients as soon as backward has produced them (offload_optimizer.gradients
// = "stream"): no gradient shard is kept anywhere, only the sub-groups between the
// reduction that filled them and the optimizer update that used them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "zoff/offload/host_buffer.h"

namespace zoff::engine {

class GradWindow {
 public:
  // Buffers of `group_elems` fp32 elements (a sub-group; the shard's last one may use
  // fewer), at most `max_buffers` (>= 1) held at once; acquire() waits at most `timeout`
  // for one to be released. Buffers are allocated on first use and kept for reuse.
  GradWindow(size_t group_elems, size_t max_buffers, std::chrono::milliseconds timeout);

  // The buffer of sub-group g (group_elems floats). A buffer newly taken for g holds what
  // its last sub-group left (not zeroed: the caller writes every element it streams and
  // zeroes the rest of a sub-group that closes incomplete, so a full sub-group costs no
  // pass of memset). Waits while all buffers are held; throws zoff::Error after the
  // timeout (the consumer is not releasing: a stalled step).
  float* acquire(size_t group);
  // The buffer of sub-group g, or null when none was acquired for it this step (its
  // gradients are all zero). Does not block.
  const float* find(size_t group);
  // g's buffer goes back to the pool (nothing happens when g holds none).
  void release(size_t group);
  // Every buffer goes back to the pool (the step ended or was abandoned).
  void release_all();

  size_t held() const;
  size_t max_buffers() const { return max_buffers_; }
  // Host bytes the window can hold at most: max_buffers x group_elems x 4.
  size_t capacity_bytes() const { return max_buffers_ * group_elems_ * sizeof(float); }

 private:
  size_t group_elems_;
  size_t max_buffers_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex mutex_;
  std::condition_variable released_;
  std::map<size_t, offload::HostBuffer> held_;  // sub-group -> its buffer
  std::vector<offload::HostBuffer> free_;       // allocated, not held (reused)
};

}  // namespace zoff::engine
