// TieredOptimizer's internals shared by its source files: a sub-group's host buffers (Slot)
// and the range copy through them (stream_range).
#pragma once

#include <algorithm>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/engine/tiered_optimizer.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/offload/io_request.h"

namespace zoff::engine {

// One set of host buffers: the master and each state of one sub-group, and the transfers
// in flight on them (the sub-group's reads, or its write-back).
struct TieredOptimizer::Slot {
  std::vector<offload::HostBuffer> buffers;  // [0] master, [1 + i] state i
  offload::HostBuffer out;                   // the compute-dtype copy, with an output region
  offload::HostBuffer ext;                   // split master: the extensions (buffers[0]: none
                                             // but the first slot's, stream_range's bounce)
  offload::HostBuffer grads;                 // the sub-group's gradients, grads_in_tier only
  std::vector<offload::IoRequest> pending;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  // The sub-group whose master and states prefetch() read into these buffers for the next
  // step (kNone: nothing read ahead).
  size_t prefetched = kNone;
  // Taken by the step for a submitted sub-group, not updated yet (run_pipeline).
  bool claimed = false;
  void wait() {
    for (auto& r : pending) r.wait();
    pending.clear();
  }
  std::vector<float*> states() {
    std::vector<float*> out;
    for (size_t i = 1; i < buffers.size(); ++i) out.push_back(buffers[i].as<float>());
    return out;
  }
};

// Copies [offset, offset + n) of one region through one sub-group buffer, window by window
// (windows are sub-groups, so every transfer is aligned). `copy(window, bytes, done)`
// moves `bytes` bytes between the window buffer at `window` and the caller's span at byte
// `done`.
template <class Copy>
void TieredOptimizer::stream_range(size_t region, size_t offset, size_t n, bool write_back,
                                   const Copy& copy) {
  ZOFF_CHECK(region < regions_.size(), "tiered optimizer: no region ", region);
  ZOFF_CHECK(offset + n <= numel_, "tiered optimizer: range [", offset, ", ", offset + n,
             ") is outside ", numel_, " elements");
  ZOFF_CHECK(!job_.active, "tiered optimizer: region ", region, " copied during a step");
  discard_prefetch();
  // The master's buffer holds a sub-group of fp32, so of any stored state too.
  auto* buf = slots_.front()->buffers.front().as<char>();
  const size_t elem = stored_bytes(region);
  size_t done = 0;
  while (done < n) {
    const size_t g = (offset + done) / static_cast<size_t>(group_);
    const size_t start = g * static_cast<size_t>(group_);
    const size_t size = group_size(g);
    const size_t first = offset + done - start;
    const size_t k = std::min(n - done, size - first);
    const uint64_t at = region_offset(region, g);
    const bool whole = first == 0 && k == size;
    if (!(write_back && whole)) regions_[region]->read(at, buf, size * elem).wait();
    copy(buf + first * elem, k * elem, done * elem);
    if (write_back) regions_[region]->write(at, buf, size * elem).wait();
    done += k;
  }
}

}  // namespace zoff::engine
