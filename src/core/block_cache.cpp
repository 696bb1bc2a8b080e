// BlockCache: freed large blocks reused by exact page-rounded size, FIFO-evicted over a cap.
#include "zoff/core/block_cache.h"

#include <unistd.h>

#include "zoff/core/error.h"
#include "zoff/core/own_mapping.h"

namespace zoff {
namespace {

size_t page_rounded(size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ZOFF_CHECK_ARG(bytes > 0 && bytes <= SIZE_MAX - page, "block cache: a block of ", bytes,
                 " bytes");
  return (bytes + page - 1) / page * page;
}

}  // namespace

BlockCache::~BlockCache() {
  std::lock_guard<std::mutex> lock(mutex_);
  trim_to(0);
}

void BlockCache::configure(size_t min_bytes, size_t cap_bytes) {
  ZOFF_CHECK_ARG(min_bytes > 0, "block cache: min_bytes = 0 (blocks of any size)");
  std::lock_guard<std::mutex> lock(mutex_);
  min_bytes_.store(min_bytes, std::memory_order_relaxed);
  cap_bytes_.store(cap_bytes, std::memory_order_relaxed);
  trim_to(cap_bytes);
}

bool BlockCache::takes(size_t bytes) const {
  return cap_bytes_.load(std::memory_order_relaxed) > 0 &&
         bytes >= min_bytes_.load(std::memory_order_relaxed);
}

void* BlockCache::allocate(size_t bytes) {
  const size_t rounded = page_rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Newest first: the block freed last is the likeliest to be resident still.
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {
      if (it->bytes != rounded) continue;
      void* data = it->data;
      cached_bytes_ -= rounded;
      free_.erase(std::next(it).base());
      ++hits_;
      return data;
    }
    ++misses_;
  }
  return map_own(rounded, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
}

void BlockCache::release(void* block, size_t bytes) {
  if (block == nullptr) return;
  const size_t rounded = page_rounded(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t cap = cap_bytes_.load(std::memory_order_relaxed);
  if (rounded > cap) {
    unmap_own(block, rounded);
    return;
  }
  trim_to(cap - rounded);
  free_.push_back({block, rounded});
  cached_bytes_ += rounded;
}

void BlockCache::trim_to(size_t cap) {
  while (cached_bytes_ > cap) {
    const Block oldest = free_.front();
    free_.pop_front();
    cached_bytes_ -= oldest.bytes;
    unmap_own(oldest.data, oldest.bytes);
  }
}

BlockCache::Stats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {hits_, misses_, cached_bytes_, free_.size()};
}

BlockCache& large_block_cache() {
  // Leaked on purpose: tensors freed during static destruction still release into it.
  static auto* cache = new BlockCache();
  return *cache;
}

}  // namespace zoff
