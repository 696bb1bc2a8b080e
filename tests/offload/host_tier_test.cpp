// Host tiers (cpu, cpu_pinned): memcpy transfers that complete at once, usage, rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/offload/tier.h"

namespace zoff::offload::host_tier_test {
namespace {

using testing::fill_pattern;

class HostTierTest : public ::testing::TestWithParam<bool> {};

TEST_P(HostTierTest, RoundTripAtOffsets) {
  auto tier = make_host_tier(GetParam());
  EXPECT_EQ(tier->name(), GetParam() ? "cpu_pinned" : "cpu");
  EXPECT_TRUE(tier->is_host());
  EXPECT_EQ(tier->alignment(), 64u);
  EXPECT_EQ(tier->io_description(), "memory");
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{1000003} * 4}) {
    auto region = tier->allocate("r", n + 128);
    ASSERT_NE(region->host_data(), nullptr);
    HostBuffer src(n, 64), dst(n, 64);
    fill_pattern(src.data(), n, static_cast<uint32_t>(n));
    auto w = region->write(128, src.data(), n);
    EXPECT_TRUE(w.done());  // memcpy: complete when it returns
    region->read(128, dst.data(), n).wait();
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << n;
    EXPECT_EQ(std::memcmp(static_cast<char*>(region->host_data()) + 128, src.data(), n), 0);
  }
}

TEST_P(HostTierTest, UsageAndNames) {
  auto tier = make_host_tier(GetParam());
  {
    auto a = tier->allocate("master", 100);
    auto b = tier->allocate("exp_avg", 64);
    EXPECT_EQ(tier->usage().host_bytes, 128u + 64u);
    EXPECT_EQ(tier->usage().disk_bytes, 0u);
    EXPECT_THROW(tier->allocate("master", 8), UsageError);
    for (size_t i = 0; i < 100; ++i) ASSERT_EQ(static_cast<char*>(a->host_data())[i], 0);
  }
  EXPECT_EQ(tier->usage().host_bytes, 0u);
  EXPECT_NO_THROW(tier->allocate("master", 8));
}

TEST_P(HostTierTest, RulesChecked) {
  auto tier = make_host_tier(GetParam());
  auto region = tier->allocate("r", 256);
  HostBuffer buf(256, 64);
  EXPECT_THROW(region->read(0, buf.as<char>() + 1, 8), Error);  // unaligned buffer
  EXPECT_THROW(region->write(8, buf.data(), 8), Error);         // unaligned offset
  EXPECT_THROW(region->write(192, buf.data(), 128), Error);     // past the end
  EXPECT_NO_THROW(region->check());
}

// A pageable region of 2 MiB and up (optimizer states stepped in place) is a huge-page
// mapping of its own: 2 MiB-aligned, zero-filled, counted whole; its transfers work as any.
TEST(HostTier, LargePageableRegionsAreHugePageMappings) {
  auto tier = make_host_tier(/*lock=*/false);
  const size_t bytes = kHugePageBytes + 4096;
  auto region = tier->allocate("exp_avg", bytes);
  const auto* data = static_cast<const unsigned char*>(region->host_data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % kHugePageBytes, 0u);
  for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(data[i], 0) << i;
  EXPECT_EQ(region->bytes(), bytes);
  EXPECT_EQ(tier->usage().host_bytes, 2 * kHugePageBytes);
  HostBuffer buf(4096, 64);
  fill_pattern(buf.data(), 4096, 7);
  region->write(kHugePageBytes, buf.data(), 4096).wait();
  EXPECT_EQ(std::memcmp(data + kHugePageBytes, buf.data(), 4096), 0);
  region.reset();
  EXPECT_EQ(tier->usage().host_bytes, 0u);
}

INSTANTIATE_TEST_SUITE_P(Host, HostTierTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "pinned" : "pageable"; });

}  // namespace
}  // namespace zoff::offload::host_tier_test
