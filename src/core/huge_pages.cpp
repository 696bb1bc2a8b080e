// Anonymous 2 MiB-aligned mappings advised for transparent huge pages.
#include "zoff/core/huge_pages.h"

#include "zoff/core/error.h"
#include "zoff/core/own_mapping.h"

namespace zoff {

void* map_huge_aligned(size_t bytes) {
  ZOFF_CHECK(bytes > 0 && bytes % kHugePageBytes == 0, "map_huge_aligned: ", bytes,
             " bytes is not a positive multiple of 2 MiB");
  return map_own(bytes, kHugePageBytes);  // 2 MiB-aligned, advised for THP from 2 MiB on
}

void unmap_huge_aligned(void* data, size_t bytes) { unmap_own(data, bytes); }

}  // namespace zoff
