// Large freed host blocks kept by size for the next allocation of that size, up to a cap.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

namespace zoff {

// Training allocates the same activations every step. A block above malloc's mmap
// threshold is mapped afresh each time and every page of it faulted in again (gpt small,
// stage 3 on NVMe, 4 MiB threshold: ~55,000 faults per rank per step); keeping all of them
// in the heap instead costs peak RSS (gpt xl, context 1024: +9%). A BlockCache keeps freed
// blocks of at least min_bytes as mappings of their own (core/own_mapping.h), so the next
// allocation of the same size takes one already faulted in, and holds at most cap_bytes of
// them: the oldest go back to the kernel first, so the RSS it adds is bounded by the cap.
// Sizes are matched exactly after rounding up to a page. Thread-safe.
class BlockCache {
 public:
  struct Stats {
    uint64_t hits = 0;    // allocations served from the cache
    uint64_t misses = 0;  // allocations mapped afresh
    size_t cached_bytes = 0;
    size_t cached_blocks = 0;
  };

  BlockCache() = default;
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Blocks of min_bytes (> 0) or more come from here while cap_bytes > 0, and at most
  // cap_bytes are kept free; cached blocks beyond a lower cap are unmapped now. Blocks
  // handed out before stay valid and come back through release() whatever the settings.
  void configure(size_t min_bytes, size_t cap_bytes);
  // Whether a block of `bytes` comes from here under the current settings.
  bool takes(size_t bytes) const;
  // A page-aligned block of at least `bytes`: a cached one of the same rounded size (its
  // old contents), else a new zero mapping. Throws zoff::Error naming the size when it
  // cannot map.
  void* allocate(size_t bytes);
  // A block from allocate(bytes): kept for reuse within the cap, else unmapped.
  void release(void* block, size_t bytes);
  Stats stats() const;

 private:
  struct Block {
    void* data;
    size_t bytes;  // rounded up to a page
  };
  void trim_to(size_t cap);  // holds mutex_

  std::atomic<size_t> min_bytes_{0};
  std::atomic<size_t> cap_bytes_{0};
  mutable std::mutex mutex_;
  std::deque<Block> free_;  // oldest first
  size_t cached_bytes_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// What the engine keeps for runs with parameters on disk (tensors of 4 MiB or more): gpt
// small, stage 3, 2 ranks, everything on NVMe, 10 steps: 490,000 page faults per rank
// without the cache, 200,000 with 64, 128 or 256 MiB (the rest is setup), +5-10% tokens/s;
// peak RSS +10-20 MB.
inline constexpr size_t kStepBlockCacheBytes = size_t{64} << 20;

// The process's cache, which zoff's CPU allocator for LibTorch tensors uses
// (engine/activation_meter.h installs it); the engine configures it with its heap policy.
BlockCache& large_block_cache();

}  // namespace zoff
