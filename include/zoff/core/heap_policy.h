// Freed heap memory kept for the next step instead of handed back to the kernel.
#pragma once

namespace zoff {

// Every training step allocates and frees the same activations, and glibc hands the free top
// of its heap back to the kernel between steps (and maps blocks above its threshold afresh
// each time), so the next step faults the pages in again (gpt small, bf16, stage 2, 2 ranks:
// ~4,700 page faults per rank per step). This takes blocks up to `mmap_bytes` from the
// heap and keeps up to `trim_bytes` of free heap top for the next step: no faults in the
// steady state, the same peak RSS (768 vs 766 MB measured), and RSS stays at that peak
// between steps. Buffers that must leave RSS when freed (stage 3's units, the tiers'
// staging) do not come from the heap at all (core/own_mapping.h). Process-wide and
// permanent; a no-op without glibc. Throws zoff::UsageError naming a size outside
// [64 KiB, 1 GiB]. With `keep_large_blocks`, blocks above glibc's largest threshold (32 MiB)
// are kept too, in zoff's CPU allocator (core/large_block_cache.h); without, what it keeps
// is unmapped and it keeps nothing more.
inline constexpr unsigned long kHeapReuseMmapBytes = 32UL << 20;
inline constexpr unsigned long kHeapReuseTrimBytes = 128UL << 20;
inline constexpr unsigned long kHeapMinTrimBytes = 64UL << 10;
// For runs whose peak RSS is the point (parameters on disk in a run short of memory:
// placement::rss_first_heap): blocks of 4 MiB or more are
// mapped afresh each step, and the free top of the heap trimmed at once (what 1, 4 and 32
// MiB cost in speed and peak RSS: docs/cpp_api.md, "Heap policy").
inline constexpr unsigned long kHeapRssFirstMmapBytes = 4UL << 20;
void keep_freed_memory_for_reuse(unsigned long mmap_bytes = kHeapReuseMmapBytes,
                                 unsigned long trim_bytes = kHeapReuseTrimBytes,
                                 bool keep_large_blocks = true);

}  // namespace zoff
