// Anonymous 2 MiB-aligned mappings advised for transparent huge pages.
#include "zoff/core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

#include "zoff/core/error.h"
#include "zoff/core/round_up.h"

namespace zoff {

void* map_huge_aligned(size_t bytes) {
  ZOFF_CHECK(bytes > 0 && bytes % kHugePageBytes == 0, "map_huge_aligned: ", bytes,
             " bytes is not a positive multiple of 2 MiB");
  const size_t span = bytes + kHugePageBytes;  // room to slide the start to a 2 MiB boundary
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZOFF_CHECK(raw != MAP_FAILED, "cannot map ", bytes, " bytes of memory");
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(base, kHugePageBytes);
  // Give back the slack before and after the aligned range (page-multiples both).
  if (start > base) munmap(raw, start - base);
  const uintptr_t end = start + bytes;
  if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
  // Advice only: without THP the memory works the same, just with 4 KiB pages.
  (void)madvise(reinterpret_cast<void*>(start), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

void unmap_huge_aligned(void* data, size_t bytes) {
  if (data != nullptr) munmap(data, bytes);
}

}  // namespace zoff
