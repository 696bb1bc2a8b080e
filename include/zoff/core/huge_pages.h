// Large arrays in mappings of their own, 2 MiB-aligned and advised for transparent huge pages.
#pragma once

#include <cstddef>

namespace zoff {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64 transparent huge page

// A zero-filled anonymous mapping of `bytes` (a multiple of kHugePageBytes), starting on a
// 2 MiB boundary and advised for THP (fewer TLB misses on multi-GB optimizer state). Never a
// piece of malloc's heap: below glibc's mmap threshold an aligned allocation is carved out
// of the main heap, and the advice then splits the heap's mapping around it (measured: a
// slower bf16 step, see optim/aligned_floats.cpp). Both the optimizer's own states and
// a host tier's regions come from here. Throws zoff::Error when it cannot map.
void* map_huge_aligned(size_t bytes);
// Unmaps what map_huge_aligned(bytes) returned.
void unmap_huge_aligned(void* data, size_t bytes);

}  // namespace zoff
