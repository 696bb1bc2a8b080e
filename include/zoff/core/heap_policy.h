// How freed host memory goes back to the kernel, for runs whose peak RSS is the limit.
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

}  // namespace zoff
