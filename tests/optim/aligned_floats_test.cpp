// AlignedFloats: alignment, and large arrays in a THP-advised mapping of their own, never in
// malloc's heap (states placed there slowed the bf16 step's forward, gpt small at 2 ranks,
// 2026-11-26; the measurements: git log -p -- docs/figures_history.md).
#include "zoff/optim/aligned_floats.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "zoff/core/heap_policy.h"

namespace zoff::optim::aligned_floats_test {
namespace {

constexpr uintptr_t kCacheLine = 64;                 // bytes
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;  // bytes

// The /proc/self/smaps entry of the mapping holding `address`: its name ("[heap]", a path or
// empty) and its VmFlags line.
struct MappingInfo {
  bool found = false;
  std::string name;
  std::string flags;
};

MappingInfo mapping_of(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  MappingInfo info;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      if (inside) return info;  // the next mapping's header: ours had no VmFlags line
      inside = a >= begin && a < end;
      if (inside) {
        info.found = true;
        std::string perms, offset, dev, inode;
        head >> perms >> offset >> dev >> inode;
        std::getline(head >> std::ws, info.name);
      }
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      info.flags = line;
      return info;
    }
  }
  return info;
}

TEST(AlignedFloats, SmallArraysStartOnACacheLine) {
  for (size_t n : {size_t{1}, size_t{17}, size_t{1000}}) {
    AlignedFloats a(n);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_EQ(a.size(), n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kCacheLine, 0u) << n;
    for (size_t i = 0; i < n; ++i) a.data()[i] = static_cast<float>(i);
    EXPECT_EQ(a.data()[n - 1], static_cast<float>(n - 1));
  }
  EXPECT_EQ(AlignedFloats(0).data(), nullptr);
}

TEST(AlignedFloats, LargeArraysAreAdvisedMappingsOfTheirOwnOutsideTheHeap) {
  // zoff's heap policy (mmap threshold 32 MiB): an 8 MiB aligned_alloc would come from the
  // main heap, which is what the array must not do.
  keep_freed_memory_for_reuse();
  const size_t n = (size_t{8} << 20) / sizeof(float) + 3;  // not a whole number of pages
  AlignedFloats a(n);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kHugePage, 0u);
  for (size_t i = 0; i < n; i += 1024) a.data()[i] = 1.0f;  // every page is writable
  a.data()[n - 1] = 2.0f;
  const MappingInfo info = mapping_of(a.data());
  ASSERT_TRUE(info.found);
  EXPECT_NE(info.name, "[heap]");
  EXPECT_NE(info.flags.find(" hg"), std::string::npos) << info.flags;  // MADV_HUGEPAGE
  const MappingInfo last = mapping_of(a.data() + n - 1);
  EXPECT_NE(last.name, "[heap]");

  // Moved, the mapping goes with the array and is unmapped once, by its last owner.
  AlignedFloats b = std::move(a);
  EXPECT_EQ(b.data()[n - 1], 2.0f);
  EXPECT_EQ(b.size(), n);
}

}  // namespace
}  // namespace zoff::optim::aligned_floats_test
