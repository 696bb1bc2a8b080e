// IoRequest: waits with a timeout, rethrows failures, and waits in its destructor.
#include "zoff/offload/io_request.h"

#include <gtest/gtest.h>

#include <atomic>

#include "zoff/core/error.h"

namespace zoff::offload::io_request_test {
namespace {

// A completion scripted by the test: how many waits time out before it finishes, or fails.
struct FakeCompletion : IoCompletion {
  FakeCompletion(std::atomic<int>* waits, int timeouts, bool fail)
      : waits(waits), timeouts(timeouts), fail(fail) {}
  bool wait_for(std::chrono::milliseconds) override {
    ++*waits;
    if (fail) throw Error("read of /x failed at offset 0 (4096 bytes): Input/output error");
    return *waits > timeouts;
  }
  std::atomic<int>* waits;
  int timeouts;
  bool fail;
};

IoRequest fake(std::atomic<int>* waits, int timeouts, bool fail = false) {
  return IoRequest(std::make_unique<FakeCompletion>(waits, timeouts, fail),
                   std::chrono::milliseconds(7), "read of 4096 bytes at 0 of /x");
}

TEST(IoRequest, DefaultIsDone) {
  IoRequest r;
  EXPECT_TRUE(r.done());
  EXPECT_NO_THROW(r.wait());
}

TEST(IoRequest, TimeoutNamesTheTransfer) {
  std::atomic<int> waits{0};
  {
    auto r = fake(&waits, 1);
    try {
      r.wait();
      FAIL() << "no timeout";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "read of 4096 bytes at 0 of /x timed out after 7 ms");
    }
    EXPECT_FALSE(r.done());  // still in flight: the destructor waits again
  }
  EXPECT_EQ(waits.load(), 2);
}

TEST(IoRequest, FailureIsRethrownOnce) {
  std::atomic<int> waits{0};
  auto r = fake(&waits, 0, /*fail=*/true);
  EXPECT_THROW(r.wait(), Error);
  EXPECT_TRUE(r.done());
}

TEST(IoRequest, DestructorAndMoveAssignmentWait) {
  std::atomic<int> waits{0};
  { auto r = fake(&waits, 0); }
  EXPECT_EQ(waits.load(), 1);
  std::atomic<int> failing{0};
  { auto r = fake(&failing, 0, /*fail=*/true); }  // errors swallowed, never thrown
  EXPECT_EQ(failing.load(), 1);
  std::atomic<int> first{0};
  std::atomic<int> second{0};
  auto r = fake(&first, 0);
  r = fake(&second, 0);
  EXPECT_EQ(first.load(), 1);
  r.wait();
  EXPECT_EQ(second.load(), 1);
}

}  // namespace
}  // namespace zoff::offload::io_request_test
