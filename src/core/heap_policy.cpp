// return_large_frees_to_kernel: a fixed glibc mmap threshold.
#include "zoff/core/heap_policy.h"

#include <cstdlib>  // defines __GLIBC__ on glibc systems

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zoff {

void return_large_frees_to_kernel(unsigned long bytes) {
#if defined(__GLIBC__)
  // Setting M_MMAP_THRESHOLD also turns glibc's dynamic adjustment off.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes));
#else
  (void)bytes;
#endif
}

}  // namespace zoff
