// A CPU allocator that keeps freed blocks too large for glibc's heap for the next step.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>

namespace zoff {

// glibc maps every block at or above its mmap threshold afresh and unmaps it when freed, and
// the threshold stops at 32 MiB (half its 64 MiB heap size). A step at gpt medium (context
// 1024, 2 x 14 heads) allocates dozens of 59 MB attention blocks, so each rank faults and
// zeroes ~700k pages per step (13% of its time in clear_page, perf). This allocator serves
// blocks of `min_bytes` or more from anonymous mappings it keeps when they are freed, and
// hands the next request of (nearly) the same size the same pages.
//
// What it maps stays within the most large-block bytes ever live at once, which a process
// without it maps too: a fresh mapping first unmaps cached blocks (least recently freed
// first) until live + cached + new is within that peak. What stays cached still counts in
// RSS beside the rest of the process (the engine keeps large blocks except in runs with their
// parameters on disk for want of memory: Placement::keep_large_blocks). Between steps what the last
// step freed stays mapped, as glibc's heap keeps its smaller blocks (heap_policy.h).
//
// Smaller blocks go to LibTorch's default CPU allocator. Thread-safe; every block is its own
// DataPtr's context (LibTorch's raw_allocate contract), and raw_deleter frees either kind.
inline constexpr size_t kLargeBlockMinBytes = size_t{32} << 20;  // glibc's largest threshold

// Counters since construction (bytes are mapped bytes, multiples of 2 MiB).
struct LargeBlockCacheStats {
  int64_t reused = 0;   // requests served from a cached block
  int64_t mapped = 0;   // requests that mapped a fresh block
  int64_t evicted = 0;  // cached blocks unmapped to keep within the peak
  size_t live_bytes = 0;
  size_t cached_bytes = 0;
  size_t peak_live_bytes = 0;
};

class LargeBlockCache final : public c10::Allocator {
 public:
  // Throws zoff::UsageError naming a `min_bytes` below 2 MiB.
  explicit LargeBlockCache(size_t min_bytes = kLargeBlockMinBytes);
  // Unmaps the cached blocks; live ones are left to their owners' deleters (which then
  // unmap them: the process-wide record of blocks outlives every cache).
  ~LargeBlockCache() override;
  LargeBlockCache(const LargeBlockCache&) = delete;
  LargeBlockCache& operator=(const LargeBlockCache&) = delete;

  c10::DataPtr allocate(size_t bytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, size_t count) const override;

  // Off: large requests go to `small` too, and freed large blocks are unmapped at once
  // (what is cached is unmapped now). On is the state after construction.
  void set_enabled(bool enabled);
  bool enabled() const;
  LargeBlockCacheStats stats() const;
  // Unmaps every cached block (live ones stay).
  void release_cached();

  // Called by the deleters with the process-wide lock held (large_block_cache.cpp).
  void take_back(void* data, size_t bytes);

 private:
  struct Cached {
    void* data;
    uint64_t freed_at;  // sequence number: the smallest is the least recently freed
  };
  void* reuse_locked(size_t bytes, size_t* block_bytes);
  void* map_locked(size_t bytes);
  void evict_oldest_locked();

  size_t min_bytes_;
  std::atomic<bool> enabled_{true};
  std::multimap<size_t, Cached> cached_;  // block bytes -> block
  uint64_t frees_ = 0;
  LargeBlockCacheStats stats_;
};

// The process-wide cache (created on first use, never destroyed: tensors freed at exit still
// come back through it). The engine's heap policy turns it on or off (heap_policy.h).
LargeBlockCache& large_block_cache();

// Makes large_block_cache() LibTorch's CPU allocator if the default one is installed now.
// An allocator that wraps the cache (the activation meter's counting one,
// engine/activation_meter.h) says so with note_allocator_over_large_block_cache and is left
// in place; any other installed allocator is left too, and the cache then serves nothing
// (said once on stderr). Idempotent.
void route_cpu_allocations_through_large_block_cache();
void note_allocator_over_large_block_cache(const c10::Allocator* allocator);

}  // namespace zoff
