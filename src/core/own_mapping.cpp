// Anonymous mappings of their own: aligned, huge-page-advised from 2 MiB, unmapped on free.
#include "zoff/core/own_mapping.h"

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/core/round_up.h"

namespace zoff {
namespace {

size_t page_bytes() {
  static const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// What own_mapping_data_ptr's deleter needs to unmap.
struct OwnMappingContext {
  void* data;
  size_t bytes;
};

void delete_own_mapping(void* context) {
  std::unique_ptr<OwnMappingContext> c(static_cast<OwnMappingContext*>(context));
  unmap_own(c->data, c->bytes);
}

}  // namespace

void* map_own(size_t bytes, size_t alignment, bool huge_pages) {
  ZOFF_CHECK(bytes > 0, "map_own: 0 bytes");
  ZOFF_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "map_own: alignment ", alignment,
             " is not a power of two");
  const bool huge = bytes >= kHugePageBytes;
  const size_t align = std::max({alignment, page_bytes(), huge ? kHugePageBytes : 0});
  const size_t length = round_up(bytes, page_bytes());
  const size_t span = length + align - page_bytes();  // room to slide the start to `align`
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ZOFF_CHECK(raw != MAP_FAILED, "cannot map ", bytes, " bytes of memory");
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = round_up(base, align);
  // Give back the slack before and after the aligned range (page multiples both).
  if (start > base) munmap(raw, start - base);
  const uintptr_t end = start + length;
  if (base + span > end) munmap(reinterpret_cast<void*>(end), base + span - end);
  // Advice only: without THP the memory works the same, with 4 KiB pages.
  if (huge) {
    (void)madvise(reinterpret_cast<void*>(start), length,
                  huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  }
  return reinterpret_cast<void*>(start);
}

void unmap_own(void* data, size_t bytes) {
  if (data != nullptr) munmap(data, round_up(bytes, page_bytes()));
}

at::DataPtr own_mapping_data_ptr(size_t bytes) {
  const at::Device cpu(at::kCPU);
  if (bytes == 0) return at::DataPtr(nullptr, cpu);
  auto context = std::make_unique<OwnMappingContext>(OwnMappingContext{nullptr, bytes});
  context->data = map_own(bytes, 64);
  at::DataPtr ptr(context->data, context.get(), &delete_own_mapping, cpu);
  context.release();  // owned by ptr's deleter now
  return ptr;
}

at::Tensor zeros_in_own_mapping(int64_t numel, at::ScalarType dtype) {
  ZOFF_CHECK(numel >= 0, "zeros_in_own_mapping: ", numel, " elements");
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, own_mapping_data_ptr(bytes),
                       c10::GetCPUAllocator(), /*resizable=*/false);
  return at::empty({0}, at::TensorOptions().dtype(dtype)).set_(storage, 0, {numel}, {1});
}

}  // namespace zoff
