// round_up / round_down: multiples of a unit, at and around the boundaries.
#include "zoff/core/round_up.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace zoff::round_up_test {
namespace {

TEST(RoundUp, ReachesTheNextMultipleAndKeepsExactOnes) {
  EXPECT_EQ(round_up(0, 64), 0u);
  EXPECT_EQ(round_up(1, 64), 64u);
  EXPECT_EQ(round_up(63, 64), 64u);
  EXPECT_EQ(round_up(64, 64), 64u);
  EXPECT_EQ(round_up(65, 64), 128u);
  EXPECT_EQ(round_up(4097, 4096), 8192u);
  EXPECT_EQ(round_up(7, 3), 9u);  // units need not be powers of two
  EXPECT_EQ(round_up(5, 1), 5u);
}

TEST(RoundUp, HandlesSizesPastFourGigabytes) {
  const size_t two_mib = size_t{2} << 20;
  const size_t big = (size_t{5} << 32) + 1;  // 20 GiB and a byte: past 32-bit arithmetic
  EXPECT_EQ(round_up(big, two_mib), (size_t{5} << 32) + two_mib);
  EXPECT_EQ(round_down(big, two_mib), size_t{5} << 32);
}

TEST(RoundDown, DropsToThePreviousMultiple) {
  EXPECT_EQ(round_down(0, 64), 0u);
  EXPECT_EQ(round_down(63, 64), 0u);
  EXPECT_EQ(round_down(64, 64), 64u);
  EXPECT_EQ(round_down(127, 64), 64u);
  EXPECT_EQ(round_down(10, 3), 9u);
}

// Usable where a constant is needed (layout constants, static_asserts).
static_assert(round_up(100, 64) == 128 && round_down(100, 64) == 64);

}  // namespace
}  // namespace zoff::round_up_test
