// How freed host memory goes back to the kernel: at once, for runs whose peak RSS is the
// limit, or kept for reuse, for runs whose speed is.
#pragma once

namespace zoff {

// glibc raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB on
// 64-bit), after which blocks of that size come from the heap, where freed ones stay
// resident between small live chunks. A stage-3 run that gathers and releases units of
// tens of MiB then holds RSS for several of them (measured: gpt medium, everything on
// disk, 868 MB peak instead of 586 MB). This pins the threshold at `bytes`, so every larger
// block is its own mapping, returned to the kernel when freed. Process-wide and permanent;
// a no-op without glibc. Costs a page-fault pass per large allocation.
void return_large_frees_to_kernel(unsigned long bytes = 256UL << 10);

// The opposite, for runs whose model states are in memory: every step allocates and frees
// the same activations, and glibc hands the free top of its heap back to the kernel between
// steps, so the next step faults the pages in again (gpt small, bf16, stage 2, 2 ranks:
// ~4,700 page faults per rank per step). This takes blocks up to `mmap_bytes` from the
// heap and keeps up to `trim_bytes` of free heap top for the next step: no faults in the
// steady state, the same peak RSS (768 vs 766 MB measured), and RSS stays at that peak
// between steps. Process-wide and permanent; a no-op without glibc. Throws
// zoff::UsageError naming a size outside [64 KiB, 1 GiB].
void keep_freed_memory_for_reuse(unsigned long mmap_bytes = 32UL << 20,
                                 unsigned long trim_bytes = 128UL << 20);

}  // namespace zoff
