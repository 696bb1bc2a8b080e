// keep_freed_memory_for_reuse: glibc's mmap and trim thresholds, fixed; the large-block cache.
#include "zoff/core/heap_policy.h"

#include <cstdlib>  // defines __GLIBC__ on glibc systems

#include "zoff/core/error.h"
#include "zoff/core/large_block_cache.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zoff {
namespace {

constexpr unsigned long kMinThresholdBytes = kHeapMinTrimBytes;
constexpr unsigned long kMaxThresholdBytes = 1UL << 30;

}  // namespace

void keep_freed_memory_for_reuse(unsigned long mmap_bytes, unsigned long trim_bytes,
                                 bool keep_large_blocks) {
  for (const unsigned long bytes : {mmap_bytes, trim_bytes}) {
    ZOFF_CHECK_ARG(bytes >= kMinThresholdBytes && bytes <= kMaxThresholdBytes,
                   "keep_freed_memory_for_reuse: ", bytes, " bytes: must be in [",
                   kMinThresholdBytes, ", ", kMaxThresholdBytes, "]");
  }
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_bytes));  // no more dynamic adjustment
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(trim_bytes));
#endif
  large_block_cache().set_enabled(keep_large_blocks);
  if (keep_large_blocks) route_cpu_allocations_through_large_block_cache();
}

}  // namespace zoff
