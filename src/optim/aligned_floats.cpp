// An owned, 64-byte aligned array of floats for optimizer state and benchmark spans.
#include "zoff/optim/aligned_floats.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

#include "zoff/core/error.h"
#include "zoff/core/round_up.h"

namespace zoff::optim {
namespace {
constexpr size_t kCacheLine = 64;              // bytes
constexpr size_t kHugePage = size_t{2} << 20;  // bytes (x86-64 transparent huge page)

// A 2 MiB-aligned anonymous mapping of `bytes` (a multiple of kHugePage), advised for THP.
// Not aligned_alloc + madvise: below glibc's mmap threshold (32 MiB under zoff's heap
// policy, so a 2-rank shard of gpt small's states) aligned_alloc carves the array out of the
// main heap, and the advice then splits the heap's mapping around it. With the states there,
// gpt small bf16 at stages 1-2 on 2 ranks ran its forward at ~350-400 ms against ~250 at
// stage 0, whose larger states were mapped on their own (2026-11-26, docs/figures.md).
float* map_huge_aligned(size_t bytes) {
  const size_t span = bytes + kHugePage;  // room to slide the start to a 2 MiB boundary
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZOFF_CHECK(raw != MAP_FAILED, "AlignedFloats: cannot map ", bytes, " bytes");
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(base, kHugePage);
  // Give back the slack before and after the aligned range (page-multiples both).
  if (start > base) munmap(raw, start - base);
  const uintptr_t end = start + bytes;
  if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
  // Advice only: without THP the memory works the same, just with 4 KiB pages.
  (void)madvise(reinterpret_cast<void*>(start), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<float*>(start);
}

}  // namespace

AlignedFloats::AlignedFloats(size_t size) : size_(size) {
  if (size == 0) return;
  const size_t bytes = size * sizeof(float);
  ZOFF_CHECK_ARG(bytes / sizeof(float) == size, "AlignedFloats: ", size, " floats overflow");
  if (bytes >= kHugePage) {
    const size_t rounded = round_up(bytes, kHugePage);
    data_ = std::unique_ptr<float, Free>(map_huge_aligned(rounded), Free{rounded});
    return;
  }
  const size_t rounded = round_up(bytes, kCacheLine);
  void* p = std::aligned_alloc(kCacheLine, rounded);
  ZOFF_CHECK(p != nullptr, "AlignedFloats: cannot allocate ", rounded, " bytes");
  data_.reset(static_cast<float*>(p));
}

void AlignedFloats::Free::operator()(float* p) const {
  if (mapped_bytes > 0) {
    munmap(p, mapped_bytes);
  } else {
    std::free(p);
  }
}

}  // namespace zoff::optim
