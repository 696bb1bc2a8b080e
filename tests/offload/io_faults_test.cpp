// The fault seam: EIO, ENOSPC, short requests and slow requests, on both backends.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "../../src/offload/io_faults_internal.h"  // the ZOFF_IO_FAULT grammar (white box)
#include "offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/tier.h"

namespace zoff::offload::io_faults_test {
namespace {

using testing::FaultHookGuard;
using testing::fill_pattern;
using testing::TempDir;
using testing::test_aio;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class IoFaultsTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  void SetUp() override { ZOFF_SKIP_WITHOUT_URING(GetParam()); }
  TempDir dir_;
  std::string path(const std::string& region) const {
    return dir_.path() + "/zoff_rank0." + region + ".swp";
  }
};

// A request failing with EIO after some blocks moved: one clean error naming file and errno.
TEST_P(IoFaultsTest, EioOnReadAndOnWrite) {
  for (IoOp op : {IoOp::kRead, IoOp::kWrite}) {
    HostBuffer buf(64 * 1024, 4096);
    auto tier = make_nvme_tier(dir_.path(), "zoff_rank0", test_aio(GetParam()));
    auto region = tier->allocate("master", 64 * 1024);
    FaultHookGuard guard([op](IoOp o, const std::string&, uint64_t offset, size_t) {
      return o == op && offset >= 16384 ? int64_t{-EIO} : int64_t{0};
    });
    const std::string msg = error_of([&] {
      (op == IoOp::kRead ? region->read(0, buf.data(), 64 * 1024)
                         : region->write(0, buf.data(), 64 * 1024))
          .wait();
    });
    EXPECT_EQ(msg.rfind(std::string(op == IoOp::kRead ? "read" : "write") + " of " +
                            path("master") + " failed at offset ",
                        0),
              0u)
        << msg;
    EXPECT_NE(msg.find("Input/output error (EIO 5)"), std::string::npos) << msg;
  }
}

// Every request shortened to half (whole pages): the remainders are resubmitted and every
// byte lands, on odd sizes too.
TEST_P(IoFaultsTest, ShortReadsAndWritesComplete) {
  std::atomic<int> shortened{0};
  FaultHookGuard guard([&](IoOp, const std::string&, uint64_t, size_t bytes) {
    if (bytes <= 4096) return int64_t{0};
    ++shortened;
    return static_cast<int64_t>(bytes / 2 / 4096 * 4096);
  });
  auto tier = make_nvme_tier(dir_.path(), "zoff_rank0", test_aio(GetParam()));
  for (size_t n : {size_t{4097}, size_t{1000003} * 4}) {
    auto region = tier->allocate("r" + std::to_string(n), n);
    HostBuffer src(n, 4096), dst(n, 4096);
    fill_pattern(src.data(), n, 11);
    region->write(0, src.data(), n).wait();
    region->read(0, dst.data(), n).wait();
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << n;
  }
  EXPECT_GT(shortened.load(), 100);
}

// Short by an amount that is not a whole page (what a buffered device may do): the rest
// starts aligned again under O_DIRECT, and exactly where it stopped when buffered.
TEST_P(IoFaultsTest, ShortByAnOddAmountCompletes) {
  FaultHookGuard guard([](IoOp, const std::string&, uint64_t, size_t bytes) {
    return bytes > 5000 ? int64_t{5000} : int64_t{0};
  });
  TempDir disk;
  testing::RamfsDir ramfs;
  for (const std::string& dir : {disk.path(), ramfs.path()}) {
    if (dir == ramfs.path() && !ramfs.mounted()) GTEST_SKIP() << ramfs.why();
    auto tier = make_nvme_tier(dir, "zoff_rank0", test_aio(GetParam()));
    const size_t n = 100003;
    auto region = tier->allocate("r", n);
    HostBuffer src(n, 4096), dst(n, 4096);
    fill_pattern(src.data(), n, 5);
    region->write(0, src.data(), n).wait();
    region->read(0, dst.data(), n).wait();
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), n), 0) << tier->io_description();
  }
}

// A request slower than the timeout: wait() gives the timeout error naming the transfer.
TEST_P(IoFaultsTest, SlowRequestTimesOut) {
  HostBuffer buf(4096, 4096);  // declared first: outlives the tier and its last request
  AioOptions aio = test_aio(GetParam());
  aio.timeout = std::chrono::milliseconds(50);
  auto tier = make_nvme_tier(dir_.path(), "zoff_rank0", aio);
  auto region = tier->allocate("master", 4096);
  FaultHookGuard guard([](IoOp, const std::string&, uint64_t, size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    return int64_t{0};
  });
  auto request = region->read(0, buf.data(), 4096);
  const std::string msg = error_of([&] { request.wait(); });
  EXPECT_EQ(msg, "read of 4096 bytes at 0 of " + path("master") + " timed out after 50 ms");
}

INSTANTIATE_TEST_SUITE_P(Backends, IoFaultsTest,
                         ::testing::Values(IoBackend::kUring, IoBackend::kThreads),
                         [](const auto& info) {
                           return info.param == IoBackend::kUring ? "uring" : "threads";
                         });

// ZOFF_IO_FAULT's hook: counts bytes of its kind, then fails (or shortens) every request.
TEST(IoFaultSpec, FailsAfterTheGivenBytes) {
  auto hook = parse_io_fault_spec("write:enospc:8192");
  EXPECT_EQ(hook(IoOp::kRead, "f", 0, 1 << 20), 0);
  EXPECT_EQ(hook(IoOp::kWrite, "f", 0, 4096), 0);
  EXPECT_EQ(hook(IoOp::kWrite, "f", 4096, 4096), 0);
  EXPECT_EQ(hook(IoOp::kWrite, "f", 8192, 4096), -ENOSPC);
  EXPECT_EQ(hook(IoOp::kWrite, "f", 8192, 4096), -ENOSPC);
  auto eio = parse_io_fault_spec("read:eio:0");
  EXPECT_EQ(eio(IoOp::kRead, "f", 0, 4096), -EIO);
  auto shorter = parse_io_fault_spec("read:short:0");
  EXPECT_EQ(shorter(IoOp::kRead, "f", 0, 1 << 20), 1 << 19);
  EXPECT_EQ(shorter(IoOp::kRead, "f", 0, 4096), 0);  // one page runs whole: progress
}

TEST(IoFaultSpec, MalformedIsAUsageErrorNamingIt) {
  for (const char* bad :
       {"", "read", "read:eio", "seek:eio:0", "read:oops:0", "read:eio:x", "read:eio:"}) {
    try {
      parse_io_fault_spec(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos);
    }
  }
}

// An injected ENOSPC on write reads exactly like a real one from the kernel.
TEST(IoFaultSpec, InjectedEnospcLooksReal) {
  TempDir dir;
  HostBuffer buf(32768, 4096);
  AioOptions aio = test_aio(IoBackend::kThreads);
  aio.thread_count = 1;  // requests in order: the first to fail is at 16384
  auto tier = make_nvme_tier(dir.path(), "zoff_rank0", aio);
  auto region = tier->allocate("master", 32768);
  FaultHookGuard guard(parse_io_fault_spec("write:enospc:16384"));
  const std::string msg = error_of([&] { region->write(0, buf.data(), 32768).wait(); });
  EXPECT_EQ(msg, "write of " + dir.path() +
                     "/zoff_rank0.master.swp failed at offset 16384 (8192 bytes): No space left "
                     "on device (ENOSPC 28)");
}

}  // namespace
}  // namespace zoff::offload::io_faults_test
