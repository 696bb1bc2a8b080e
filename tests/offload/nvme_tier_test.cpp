// NVMe tier round trips: odd sizes at offsets, both backends, O_DIRECT and buffered, threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload::nvme_tier_test {
namespace {

using testing::fill_pattern;
using testing::TempDir;
using testing::test_aio;

struct Case {
  IoBackend backend;
  bool on_disk;  // false: a ramfs, where O_DIRECT is refused (the buffered fallback)
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.backend == IoBackend::kUring ? "uring" : "threads") +
         (info.param.on_disk ? "_disk" : "_no_direct");
}

class NvmeTierTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    ZOFF_SKIP_WITHOUT_URING(GetParam().backend);
    if (!GetParam().on_disk && !ramfs_.mounted()) GTEST_SKIP() << ramfs_.why();
    dir_ = GetParam().on_disk ? disk_.path() : ramfs_.path();
  }
  std::unique_ptr<Tier> make(AioOptions aio) { return make_nvme_tier(dir_, "zoff_rank0", aio); }
  TempDir disk_;
  testing::RamfsDir ramfs_;
  std::string dir_;
};

// Sizes 1, 4095, 4096, 4097 bytes and a prime number of floats, at offset 0 and further in.
TEST_P(NvmeTierTest, RoundTripOddSizesAtOffsets) {
  auto tier = make(test_aio(GetParam().backend));
  const std::string io = tier->io_description();
  EXPECT_NE(io.find(GetParam().backend == IoBackend::kUring ? "io_uring" : "threads"),
            std::string::npos)
      << io;
  EXPECT_NE(io.find(GetParam().on_disk ? "O_DIRECT" : "buffered (O_DIRECT refused)"),
            std::string::npos)
      << io;
  for (size_t n : {size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{1000003} * 4}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{3} * 4096}) {
      auto region = tier->allocate("master", offset + n);
      EXPECT_EQ(region->host_data(), nullptr);
      HostBuffer src(n, 4096), dst(n, 4096);
      fill_pattern(src.data(), n, static_cast<uint32_t>(n + offset));
      region->write(offset, src.data(), n).wait();
      region->read(offset, dst.data(), n).wait();
      ASSERT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << n << " bytes at " << offset;
    }
  }
}

TEST_P(NvmeTierTest, NewRegionReadsZerosAndUsageCountsFiles) {
  auto tier = make(test_aio(GetParam().backend));
  const size_t n = 3 * 8192 + 5;
  {
    auto region = tier->allocate("exp_avg", n);
    EXPECT_EQ(tier->usage().disk_bytes, 7u * 4096);  // padded to the 4096-byte alignment
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/zoff_rank0.exp_avg.swp"));
    HostBuffer dst(n, 4096);
    std::memset(dst.data(), 0xAB, dst.capacity());
    region->read(0, dst.data(), n).wait();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(dst.as<uint8_t>()[i], 0) << i;
  }
  EXPECT_EQ(tier->usage().disk_bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/zoff_rank0.exp_avg.swp"));
}

// Two threads, each with its own region and several transfers in flight at once.
TEST_P(NvmeTierTest, ConcurrentTransfersFromTwoThreads) {
  auto tier = make(test_aio(GetParam().backend));
  constexpr size_t kChunk = 5 * 8192 + 4096;  // bytes per transfer: several blocks each
  constexpr int kChunks = 6;
  auto worker = [&](int id) {
    auto region = tier->allocate("t" + std::to_string(id), kChunk * kChunks);
    std::vector<HostBuffer> src, dst;
    for (int round = 0; round < 5; ++round) {
      src.clear();
      dst.clear();
      std::vector<IoRequest> pending;
      for (int c = 0; c < kChunks; ++c) {
        src.emplace_back(kChunk, 4096);
        fill_pattern(src.back().data(), kChunk, static_cast<uint32_t>(id * 1000 + round * 10 + c));
        pending.push_back(region->write(c * kChunk, src.back().data(), kChunk));
      }
      for (auto& r : pending) r.wait();
      pending.clear();
      for (int c = 0; c < kChunks; ++c) {
        dst.emplace_back(kChunk, 4096);
        pending.push_back(region->read(c * kChunk, dst.back().data(), kChunk));
      }
      for (auto& r : pending) r.wait();
      for (int c = 0; c < kChunks; ++c) {
        ASSERT_EQ(std::memcmp(src[c].data(), dst[c].data(), kChunk), 0) << id << " " << c;
      }
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
}

TEST_P(NvmeTierTest, UnalignedBufferOffsetAndOverrunRejected) {
  auto tier = make(test_aio(GetParam().backend));
  auto region = tier->allocate("r", 3 * 4096);
  HostBuffer buf(8192, 4096);
  try {
    region->read(0, buf.as<char>() + 64, 100);
    FAIL() << "unaligned buffer accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not aligned to 4096"), std::string::npos) << e.what();
  }
  EXPECT_THROW(region->write(512, buf.data(), 100), Error);
  EXPECT_THROW(region->write(8192, buf.data(), 4097), Error);
  EXPECT_TRUE(region->write(0, buf.data(), 0).done());
}

TEST_P(NvmeTierTest, RegionNamesChecked) {
  auto tier = make(test_aio(GetParam().backend));
  auto a = tier->allocate("master", 10);
  EXPECT_THROW(tier->allocate("master", 10), UsageError);
  EXPECT_THROW(tier->allocate("../evil", 10), UsageError);
  EXPECT_THROW(tier->allocate("Upper", 10), UsageError);
  EXPECT_THROW(tier->allocate("", 10), UsageError);
}

INSTANTIATE_TEST_SUITE_P(Backends, NvmeTierTest,
                         ::testing::Values(Case{IoBackend::kUring, true},
                                           Case{IoBackend::kUring, false},
                                           Case{IoBackend::kThreads, true},
                                           Case{IoBackend::kThreads, false}),
                         case_name);

// DeepSpeed's single_submit and overlap_events = false (batches reaped whole) still move
// every byte; queue depth 1 is the narrowest pipe.
TEST(NvmeTierOptions, SingleSubmitBatchReapAndDepthOne) {
  ZOFF_SKIP_WITHOUT_URING(IoBackend::kUring);
  TempDir dir;
  for (int variant = 0; variant < 3; ++variant) {
    AioOptions aio = test_aio(IoBackend::kUring);
    aio.single_submit = variant == 0;
    aio.overlap_events = variant != 1;
    if (variant == 2) aio.queue_depth = 1;
    auto tier = make_nvme_tier(dir.path(), "opts", aio);
    const size_t n = 1000003;
    auto region = tier->allocate("r", n);
    HostBuffer src(n, 4096), dst(n, 4096);
    fill_pattern(src.data(), n, 7u + static_cast<uint32_t>(variant));
    region->write(0, src.data(), n).wait();
    region->read(0, dst.data(), n).wait();
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << variant;
  }
}

TEST(NvmeTierOptions, AutoPicksUringWhenAllowedAndDirectOffIsBuffered) {
  TempDir dir;
  AioOptions aio = test_aio(IoBackend::kAuto);
  aio.direct = false;
  auto tier = make_nvme_tier(dir.path(), "auto", aio);
  const std::string io = tier->io_description();
  const bool uring = io_uring_unavailable_reason().empty();
  EXPECT_EQ(io.rfind(uring ? "io_uring" : "threads (io_uring refused: ", 0), 0u) << io;
  EXPECT_NE(io.find("buffered (direct = false)"), std::string::npos) << io;
  auto region = tier->allocate("r", 5000);
  HostBuffer src(5000, 4096), dst(5000, 4096);
  fill_pattern(src.data(), 5000, 3);
  region->write(0, src.data(), 5000).wait();
  region->read(0, dst.data(), 5000).wait();
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), 5000), 0);
}

TEST(NvmeTierOptions, BadOptionsAreUsageErrors) {
  TempDir dir;
  AioOptions aio;
  aio.block_size = 1000;
  EXPECT_THROW(make_nvme_tier(dir.path(), "x", aio), UsageError);
}

}  // namespace
}  // namespace zoff::offload::nvme_tier_test
