// GlooComm's own behaviour: its name, and a rendezvous that cannot complete (the collectives of
// every transport are in collectives_test.cpp).
#include "zoff/dist/gloo_comm.h"

#include <gtest/gtest.h>

#include "rank_threads.h"
#include "zoff/core/error.h"

namespace zoff::dist::gloo_comm_test {
namespace {

using std::chrono::milliseconds;
using testing::message_of;
using testing::run_ranks;
using testing::run_ranks_ok;

TEST(GlooComm, ReportsTheBackendAndWorld) {
  run_ranks_ok(3,
               [&](Comm& comm, int rank) {
                 EXPECT_EQ(comm.backend(), "gloo");
                 EXPECT_EQ(comm.rank(), rank);
                 EXPECT_EQ(comm.size(), 3);
               },
               {Transport::kGloo});
}

// ---- failing cleanly ----

TEST(GlooComm, RendezvousWithAMissingRankTimesOutCountingArrivals) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, milliseconds(3000), [](Comm&, int) {}, {0, 1});
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < errors.size(); ++i) {
    ASSERT_TRUE(errors[i]);
    const auto message = message_of(errors[i]);
    EXPECT_NE(message.find("127.0.0.1:"), std::string::npos) << message;
    // Rank 0 hosts the store and counts arrivals. Another rank may time out first the
    // same way, or find the store gone once rank 0 gave up: both are named failures.
    const bool counted = message.find("2 of 3 ranks arrived") != std::string::npos;
    const bool lost_store = message.find("lost the store") != std::string::npos;
    if (i == 0) {
      EXPECT_TRUE(counted) << message;
    } else {
      EXPECT_TRUE(counted || lost_store) << message;
    }
  }
  EXPECT_LT(elapsed_s, 15.0);
}

TEST(GlooComm, RendezvousWithoutAHostNamesTheAddress) {
  const auto start = std::chrono::steady_clock::now();
  auto errors = run_ranks(2, milliseconds(1000), [](Comm&, int) {}, {1});
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(errors[0]);
  const auto message = message_of(errors[0]);
  EXPECT_NE(message.find("rendezvous at 127.0.0.1:"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_LT(elapsed_s, 10.0);
}

TEST(GlooComm, TwoProcessesClaimingOneRankIsAUsageError) {
  // A generous timeout: c10d's store connect has whole-second steps and a loaded 2-core
  // machine can take over a second to start the store; the claim check itself is instant.
  auto errors = run_ranks(3, milliseconds(5000), [](Comm&, int) {}, {0, 1, 1});
  int usage_errors = 0;
  for (auto& e : errors) {
    ASSERT_TRUE(e);  // the job cannot form: every rank fails, none hangs
    try {
      std::rethrow_exception(e);
    } catch (const UsageError& u) {
      ++usage_errors;
      EXPECT_NE(std::string(u.what()).find("RANK=1 was claimed by 2"), std::string::npos)
          << u.what();
    } catch (const Error&) {
    }
  }
  EXPECT_EQ(usage_errors, 1);
}

}  // namespace
}  // namespace zoff::dist::gloo_comm_test
