// heap_policy.h: freed blocks kept resident for the next step.
#include "zoff/core/heap_policy.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::heap_policy_test {
namespace {

constexpr size_t kBlockBytes = 16UL << 20;  // an activation's size: above glibc's 128 KiB

// Whether every page of [begin, begin + bytes) is mapped and resident (mincore; an unmapped
// page makes it fail with ENOMEM). VmRSS is no use here: the kernel sums it lazily.
bool resident(uintptr_t begin, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  std::vector<unsigned char> pages((last - first) / page);
  if (mincore(reinterpret_cast<void*>(first), last - first, pages.data()) != 0) return false;
  for (const unsigned char p : pages) {
    if ((p & 1) == 0) return false;
  }
  return true;
}

// In a fresh child process: allocates, touches and frees one block, and exits 0 when its
// pages after the free are as `kept` says (still resident, or handed back).
void free_block_and_check(bool kept) {
  void* block = std::malloc(kBlockBytes);
  if (block == nullptr) std::exit(2);
  std::memset(block, 1, kBlockBytes);
  const auto address = reinterpret_cast<uintptr_t>(block);  // only its pages are looked at
  if (!resident(address, kBlockBytes)) std::exit(3);
  std::free(block);
  std::exit(resident(address, kBlockBytes) == kept ? 0 : 1);
}

TEST(HeapPolicy, KeepForReuseLeavesAFreedBlockResident) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        keep_freed_memory_for_reuse();
        free_block_and_check(/*kept=*/true);
      },
      testing::ExitedWithCode(0), "");
}

// glibc's own policy maps a block this large by itself and unmaps it when freed: what the
// policy above changes (and what makes its check able to fail).
TEST(HeapPolicy, WithoutItALargeFreedBlockLeavesAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(free_block_and_check(/*kept=*/false), testing::ExitedWithCode(0), "");
}

TEST(HeapPolicy, SizesOutOfRangeAreRefusedNamingThem) {
  try {
    keep_freed_memory_for_reuse(0);
    FAIL() << "a 0-byte threshold was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("0 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(keep_freed_memory_for_reuse(32UL << 20, 4UL << 30), UsageError);
}

}  // namespace
}  // namespace zoff::heap_policy_test
