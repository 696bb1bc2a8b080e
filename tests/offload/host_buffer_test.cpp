// HostBuffer: alignment, capacity rounding, zero fill, locking.
#include "zoff/offload/host_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>

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
