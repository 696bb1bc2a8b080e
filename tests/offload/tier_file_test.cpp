// Tier files: deleted or truncated under a run (check() and reads), ENOSPC at allocate().
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload::tier_file_test {
namespace {

using testing::TempDir;
using testing::test_aio;
namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class TierFileTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override { ZOFF_SKIP_WITHOUT_URING(GetParam()); }
};

TEST_P(TierFileTest, DeletedFileCaughtByCheckAndRead) {
  TempDir dir;
  auto tier = make_nvme_tier(dir.path(), "zoff_rank0", test_aio(GetParam()));
  auto region = tier->allocate("master", 3 * 4096);
  const std::string path = dir.path() + "/zoff_rank0.master.swp";
  EXPECT_NO_THROW(region->check());
  ASSERT_EQ(unlink(path.c_str()), 0);
  std::string msg = error_of([&] { region->check(); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("deleted"), std::string::npos) << msg;
  HostBuffer buf(4096, 4096);
  msg = error_of([&] { region->read(0, buf.data(), 4096).wait(); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("deleted"), std::string::npos) << msg;
}

TEST_P(TierFileTest, TruncatedFileCaughtByCheckAndRead) {
  TempDir dir;
  auto tier = make_nvme_tier(dir.path(), "zoff_rank0", test_aio(GetParam()));
  auto region = tier->allocate("master", 3 * 4096);
  const std::string path = dir.path() + "/zoff_rank0.master.swp";
  ASSERT_EQ(truncate(path.c_str(), 4096), 0);
  std::string msg = error_of([&] { region->check(); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 12288"), std::string::npos) << msg;
  HostBuffer buf(8192, 4096);
  msg = error_of([&] { region->read(4096, buf.data(), 8192).wait(); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

// The file shrinks after check() passed, between submission and the request: the read
// itself comes back with 0 bytes and names the file, the offset and the expected size.
TEST_P(TierFileTest, TruncatedUnderARequestCaughtByTheRead) {
  TempDir dir;
  HostBuffer buf(16384, 4096);  // outlives the tier: no request can touch freed memory
  auto tier = make_nvme_tier(dir.path(), "zoff_rank0", test_aio(GetParam()));
  auto region = tier->allocate("master", 16384);
  const std::string path = dir.path() + "/zoff_rank0.master.swp";
  testing::FaultHookGuard guard([&](IoOp op, const std::string& p, uint64_t, size_t) {
    if (op == IoOp::kRead && p == path) {
      if (truncate(path.c_str(), 0) != 0) return int64_t{-errno};
    }
    return int64_t{0};
  });
  const std::string msg = error_of([&] { region->read(0, buf.data(), 16384).wait(); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("end of the file at offset"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected 16384 bytes"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Backends, TierFileTest,
                         ::testing::Values(IoBackend::kUring, IoBackend::kThreads),
                         [](const auto& info) {
                           return info.param == IoBackend::kUring ? "uring" : "threads";
                         });

// A real full filesystem: a 1 MiB tmpfs; allocating 4 MiB fails at allocate(), cleanly.
TEST(TierFileSpace, EnospcAtAllocateNamesFileAndErrno) {
  TempDir dir;
  const std::string small = dir.path() + "/small";
  fs::create_directory(small);
  if (mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here: " << std::strerror(errno);
  }
  std::string msg;
  {
    auto tier = make_nvme_tier(small, "zoff_rank0", test_aio(IoBackend::kThreads));
    auto fits = tier->allocate("fits", 256 * 1024);
    msg = error_of([&] { tier->allocate("master", 4 << 20); });
    EXPECT_FALSE(fs::exists(small + "/zoff_rank0.master.swp"));  // nothing left behind
    EXPECT_NO_THROW(tier->allocate("master", 64 * 1024));        // the name is free again
  }
  umount(small.c_str());
  EXPECT_NE(msg.find(small + "/zoff_rank0.master.swp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("No space left on device (ENOSPC"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fallocate of 4194304 bytes"), std::string::npos) << msg;
}

}  // namespace
}  // namespace zoff::offload::tier_file_test
