// Blocks of host memory in anonymous mappings of their own, so freeing one hands its pages
// straight back to the kernel whatever malloc's thresholds are.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include <cstddef>

namespace zoff {

// Below this a block comes from malloc: a mapping per block would cost a system call and a
// fault per page for buffers the heap reuses for free.
inline constexpr size_t kOwnMappingMinBytes = size_t{256} << 10;

// A zero-filled anonymous mapping of `bytes` (> 0) starting on a multiple of `alignment` (a
// power of two; at least a page). From 2 MiB on it starts on a 2 MiB boundary and is advised
// for transparent huge pages: a fault per 2 MiB instead of per 4 KiB, for buffers mapped
// afresh every step (stage 3's units). The kernel gives a huge page only to a 2 MiB block
// wholly inside the mapping, so a tail past the last whole block keeps 4 KiB pages and the
// resident bytes stay within a page of the touched ones. With `huge_pages` false the mapping
// is advised against them (MADV_NOHUGEPAGE): for blocks mapped once and reused, where the
// huge pages' faults, compacted and zeroed on this kernel, cost more than their TLB savings
// (core/large_block_cache.h). Throws zoff::Error naming the size when it cannot map.
void* map_own(size_t bytes, size_t alignment, bool huge_pages = true);
// Unmaps what map_own(bytes, ...) returned; a null `data` is a no-op.
void unmap_own(void* data, size_t bytes);

// A CPU DataPtr over map_own(bytes, 64), unmapped when the storage lets go of it; a null
// DataPtr for 0 bytes. For tensor storage that is allocated and freed many times a step
// and must not stay resident in the heap once freed (stage 3's gathered units).
at::DataPtr own_mapping_data_ptr(size_t bytes);

// A 1-D CPU tensor of `numel` elements of `dtype` whose storage is own_mapping_data_ptr's:
// zero, and untouched (no RSS) until written.
at::Tensor zeros_in_own_mapping(int64_t numel, at::ScalarType dtype);

}  // namespace zoff
