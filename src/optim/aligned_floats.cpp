// An owned, 64-byte aligned array of floats for optimizer state and benchmark spans.
#include "zoff/optim/aligned_floats.h"

#include <sys/mman.h>

#include <cstdlib>

#include "zoff/core/error.h"

namespace zoff::optim {
namespace {
constexpr size_t kCacheLine = 64;              // bytes
constexpr size_t kHugePage = size_t{2} << 20;  // bytes (x86-64 transparent huge page)
}  // namespace

AlignedFloats::AlignedFloats(size_t size) : size_(size) {
  if (size == 0) return;
  const size_t bytes = size * sizeof(float);
  ZOFF_CHECK_ARG(bytes / sizeof(float) == size, "AlignedFloats: ", size, " floats overflow");
  const size_t alignment = bytes >= kHugePage ? kHugePage : kCacheLine;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  ZOFF_CHECK(p != nullptr, "AlignedFloats: cannot allocate ", rounded, " bytes");
  if (alignment == kHugePage) {
    // Advice only: without THP the memory works the same, just with 4 KiB pages.
    (void)madvise(p, rounded, MADV_HUGEPAGE);
  }
  data_.reset(static_cast<float*>(p));
}

void AlignedFloats::Free::operator()(float* p) const { std::free(p); }

}  // namespace zoff::optim
