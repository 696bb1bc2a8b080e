// own_mapping.h: aligned zero-filled mappings of their own, untouched until written, handed
// back to the kernel when freed (as tensor storage too), and clean errors on bad sizes.
#include "zoff/core/own_mapping.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"

namespace zoff::own_mapping_test {
namespace {

size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// Pages of [data, data + bytes) resident now; -1 when part of the range is not mapped.
int64_t resident_pages(const void* data, size_t bytes) {
  std::vector<unsigned char> pages((bytes + page() - 1) / page());
  if (mincore(const_cast<void*>(data), bytes, pages.data()) != 0) return -1;
  int64_t n = 0;
  for (const unsigned char p : pages) n += p & 1;
  return n;
}

TEST(OwnMapping, AlignedZeroFilledAndGoneOnceUnmapped) {
  for (const size_t bytes : {kOwnMappingMinBytes + 1, 3 * kHugePageBytes + 12345}) {
    for (const size_t alignment : {size_t{64}, size_t{4096}, size_t{64} << 10}) {
      void* p = map_own(bytes, alignment);
      const auto at = reinterpret_cast<uintptr_t>(p);
      EXPECT_EQ(at % alignment, 0u) << bytes << " bytes";
      if (bytes >= kHugePageBytes) {
        EXPECT_EQ(at % kHugePageBytes, 0u) << bytes << " bytes";
      }
      EXPECT_EQ(resident_pages(p, bytes), 0) << "a fresh mapping is already resident";
      const std::vector<char> zeros(bytes, 0);
      EXPECT_EQ(std::memcmp(p, zeros.data(), bytes), 0);
      std::memset(p, 7, bytes);  // every byte writable, the last one included
      EXPECT_GT(resident_pages(p, bytes), 0);
      unmap_own(p, bytes);
      EXPECT_EQ(resident_pages(p, bytes), -1) << "still mapped after unmap_own";
    }
  }
}

TEST(OwnMapping, TensorStorageIsUntouchedUntilWrittenAndUnmappedWithTheLastView) {
  const int64_t numel = 3 << 20;  // 6 MiB of bf16
  const size_t bytes = static_cast<size_t>(numel) * 2;
  const void* data = nullptr;
  torch::Tensor view;
  {
    auto t = zeros_in_own_mapping(numel, torch::kBFloat16);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{numel}));
    EXPECT_EQ(t.scalar_type(), torch::kBFloat16);
    data = t.data_ptr();
    EXPECT_EQ(resident_pages(data, bytes), 0);
    EXPECT_EQ(t.narrow(0, numel - 4, 4).sum().item<float>(), 0.0f);  // reads a zero page
    t.fill_(1.5f);
    view = t.narrow(0, 100, 3);
  }
  EXPECT_TRUE(torch::equal(view, torch::full({3}, 1.5f, torch::kBFloat16)));
  view = torch::Tensor();
  EXPECT_EQ(resident_pages(data, bytes), -1) << "the storage outlived its last tensor";
  EXPECT_EQ(zeros_in_own_mapping(0, torch::kFloat32).numel(), 0);
}

TEST(OwnMapping, BadSizesAreRefusedNamingThem) {
  try {
    map_own(4096, 3000);
    ADD_FAILURE() << "alignment 3000 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3000"), std::string::npos) << e.what();
  }
  EXPECT_THROW(map_own(0, 64), Error);
  EXPECT_THROW(zeros_in_own_mapping(-5, torch::kFloat32), Error);
  try {
    map_own(size_t{1} << 62, 64);  // more than any address space here
    ADD_FAILURE() << "2^62 bytes were mapped";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(size_t{1} << 62)), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zoff::own_mapping_test
