// HostBuffer: alignment, capacity rounding, zero fill, locking, large buffers unmapped.
#include "zoff/offload/host_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::offload::host_buffer_test {
namespace {

TEST(HostBuffer, AlignedZeroedAndRoundedUp) {
  for (size_t bytes : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}}) {
    HostBuffer b(bytes, 4096);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
    EXPECT_EQ(b.bytes(), bytes);
    EXPECT_EQ(b.capacity(), (bytes + 4095) / 4096 * 4096);
    for (size_t i = 0; i < b.capacity(); ++i) ASSERT_EQ(b.as<uint8_t>()[i], 0) << i;
  }
}

// From kOwnMappingMinBytes on a buffer is a mapping of its own: aligned and zeroed the same,
// and gone from the address space (so from RSS) once freed.
TEST(HostBuffer, LargeBuffersAreMappingsHandedBackWhenFreed) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (const size_t alignment : {size_t{4096}, size_t{2} << 20}) {
    const size_t bytes = (size_t{3} << 20) + 5;
    const void* data = nullptr;
    {
      HostBuffer b(bytes, alignment);
      data = b.data();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % alignment, 0u);
      EXPECT_EQ(b.capacity(), (bytes + alignment - 1) / alignment * alignment);
      for (size_t i = 0; i < b.capacity(); i += 997) ASSERT_EQ(b.as<uint8_t>()[i], 0) << i;
      b.as<uint8_t>()[b.capacity() - 1] = 1;
    }
    std::vector<unsigned char> resident(1);
    EXPECT_NE(mincore(const_cast<void*>(data), page, resident.data()), 0)
        << "a freed " << bytes << "-byte buffer is still mapped";
  }
}

TEST(HostBuffer, DefaultAndMoved) {
  HostBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
  HostBuffer a(100, 64);
  void* p = a.data();
  HostBuffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  empty = std::move(b);
  EXPECT_EQ(empty.data(), p);
}

TEST(HostBuffer, LockedPages) {
  HostBuffer b(1 << 20, 4096, /*lock=*/true);
  EXPECT_TRUE(b.locked());
}

TEST(HostBuffer, BadAlignmentRefused) {
  EXPECT_THROW(HostBuffer(10, 48), UsageError);
  EXPECT_THROW(HostBuffer(10, 32), UsageError);
}

}  // namespace
}  // namespace zoff::offload::host_buffer_test
