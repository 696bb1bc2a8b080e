// The striped NVMe tier: bytes land stripe by stripe in each directory and come back whole.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload {
namespace {

namespace fs = std::filesystem;
using testing::fill_pattern;
using testing::TempDir;
using testing::test_aio;

constexpr size_t kStripe = 8192;  // two 4 KiB blocks: small, so transfers cross many stripes

TEST(StripedTier, RoundTripAcrossStripesAndOffsets) {
  TempDir a, b;
  auto tier = make_striped_nvme_tier({a.path(), b.path()}, "zoff_rank0", test_aio(IoBackend::kAuto),
                                     kStripe);
  EXPECT_EQ(tier->name(), "nvme_striped");
  EXPECT_NE(tier->io_description().find("striped over 2 directories"), std::string::npos);
  // Sizes that end inside a stripe, on a stripe boundary, and span odd stripe counts.
  for (size_t n : {size_t{1}, size_t{4097}, kStripe, 3 * kStripe + 5, size_t{1000003}}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{4096}, uint64_t{3} * kStripe}) {
      auto region = tier->allocate("master", offset + n);
      HostBuffer src(n, 4096), dst(n, 4096);
      fill_pattern(src.data(), n, static_cast<uint32_t>(n + offset));
      region->write(offset, src.data(), n).wait();
      region->read(offset, dst.data(), n).wait();
      ASSERT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << n << " bytes at " << offset;
    }
  }
}

// Stripe i of a region is in directory i % 2: each file holds its own stripes, in order.
TEST(StripedTier, StripesAlternateBetweenTheDirectories) {
  TempDir a, b;
  auto tier = make_striped_nvme_tier({a.path(), b.path()}, "zoff_rank0",
                                     test_aio(IoBackend::kThreads), kStripe);
  const size_t n = 5 * kStripe;  // stripes 0, 2, 4 in a; 1, 3 in b
  auto region = tier->allocate("states", n);
  HostBuffer src(n, 4096);
  fill_pattern(src.data(), n, 7);
  region->write(0, src.data(), n).wait();
  const fs::path fa = fs::path(a.path()) / "zoff_rank0.states.swp";
  const fs::path fb = fs::path(b.path()) / "zoff_rank0.states.swp";
  ASSERT_TRUE(fs::exists(fa) && fs::exists(fb));
  EXPECT_EQ(fs::file_size(fa), 3 * kStripe);
  EXPECT_EQ(fs::file_size(fb), 2 * kStripe);
  EXPECT_EQ(tier->usage().disk_bytes, n);
  // Stripe 3 is b's second stripe.
  HostBuffer dst(kStripe, 4096);
  FILE* f = std::fopen(fb.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fseek(f, static_cast<long>(kStripe), SEEK_SET), 0);
  ASSERT_EQ(std::fread(dst.data(), 1, kStripe, f), kStripe);
  std::fclose(f);
  EXPECT_EQ(std::memcmp(dst.as<char>(), src.as<char>() + 3 * kStripe, kStripe), 0);
  region.reset();
  EXPECT_FALSE(fs::exists(fa));  // the files go with their region
  EXPECT_FALSE(fs::exists(fb));
}

TEST(StripedTier, AFileRemovedUnderOneStripeIsNamed) {
  TempDir a, b;
  auto tier = make_striped_nvme_tier({a.path(), b.path()}, "zoff_rank0",
                                     test_aio(IoBackend::kThreads), kStripe);
  auto region = tier->allocate("master", 4 * kStripe);
  const std::string gone = (fs::path(b.path()) / "zoff_rank0.master.swp").string();
  fs::remove(gone);
  try {
    region->check();
    FAIL() << "a removed stripe file was not noticed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(gone), std::string::npos) << e.what();
  }
}

TEST(StripedTier, BadDirectoryListsAreRefusedNamingTheValue) {
  TempDir a, b;
  const auto aio = test_aio(IoBackend::kThreads);
  EXPECT_THROW(make_striped_nvme_tier({a.path()}, "r", aio), UsageError);
  try {
    make_striped_nvme_tier({a.path(), a.path() + "/."}, "r", aio);
    FAIL() << "the same directory twice was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("same directory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_striped_nvme_tier({a.path(), b.path()}, "r", aio, 1000), UsageError);
  EXPECT_THROW(make_striped_nvme_tier({a.path(), "/proc/zoff-no-such-dir"}, "r", aio), UsageError);
}

}  // namespace
}  // namespace zoff::offload
