// Heartbeat as a library uses it: ranks are threads, each with its own store client; silence is
// reported to an on_silence callback instead of ending the process.
#include "zoff/dist/heartbeat.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "rank_threads.h"
#include "zoff/core/error.h"

namespace zoff::dist::heartbeat_test {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kTimeout{500};
// Generous bounds on a loaded 2-core machine: how long a report may take, and how long ranks
// outlive each other in the no-report test (several timeouts).
constexpr milliseconds kReportBound{20000};
constexpr milliseconds kOutlive{2000};

// What on_silence was called with, shared by the rank threads.
struct Reports {
  std::mutex mutex;
  std::vector<std::string> messages;
  std::function<void(const std::string&)> callback() {
    return [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mutex);
      messages.push_back(m);
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages.size();
  }
};

// Rank 1 never beats (as if stopped from the start): rank 0 names it after the timeout.
TEST(Heartbeat, RankZeroReportsARankThatNeverBeats) {
  Reports reports;
  std::atomic<bool> reported{false};
  // Rank 1 joins the job (so rank 0's store and mesh come up) but starts no heartbeat.
  const int port = pick_free_port();
  std::thread silent([&] {
    try {
      auto comm = init_comm(testing::loopback_world(1, 2, port), std::chrono::seconds(30));
      const auto until = std::chrono::steady_clock::now() + kReportBound;
      while (!reported && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(milliseconds(20));
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 1: " << e.what();
    }
  });
  try {
    const WorldInfo world = testing::loopback_world(0, 2, port);
    auto comm = init_comm(world, std::chrono::seconds(30));
    Heartbeat heartbeat(world, {kTimeout, reports.callback()});
    const auto until = std::chrono::steady_clock::now() + kReportBound;
    while (reports.count() == 0 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(milliseconds(20));
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
  }
  reported = true;
  silent.join();
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.messages[0],
            "rank 1 sent no heartbeat for 0.5 s (stopped, wedged or cut off?)");
}

// Ranks finish at their own pace: a finished rank (its Heartbeat gone) is not silent, and a
// store that closed with rank 0's end is not a stopped rank 0.
TEST(Heartbeat, RanksFinishingAtDifferentTimesAreNotReported) {
  for (int lingering : {0, 1}) {
    Reports reports;
    const int port = pick_free_port();
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      ranks.emplace_back([&, rank] {
        const WorldInfo world = testing::loopback_world(rank, 2, port);
        auto comm = init_comm(world, std::chrono::seconds(30));
        comm->barrier();
        Heartbeat heartbeat(world, {kTimeout, reports.callback()});
        std::this_thread::sleep_for(rank == lingering ? kOutlive : milliseconds(0));
      });
    }
    for (auto& t : ranks) t.join();
    EXPECT_EQ(reports.count(), 0u)
        << "rank " << lingering
        << " outlived the other: " << (reports.count() > 0 ? reports.messages[0] : "");
  }
}

// Ranks on two hosts: rank 0 ends (as when it lost another host) while rank 1 still runs.
// No launcher sees both, so rank 1 ends itself one timeout later, naming rank 0's host.
TEST(Heartbeat, OnSeveralHostsARankOutlivingTheStoreReportsIt) {
  Reports reports;
  const int port = pick_free_port();
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      WorldInfo world = testing::loopback_world(rank, 2, port);
      world.local_rank = 0;
      world.local_world_size = 1;  // one rank per host
      auto comm = init_comm(world, std::chrono::seconds(30));
      comm->barrier();
      Heartbeat heartbeat(world, {kTimeout, reports.callback()});
      comm->barrier();  // both heartbeats reached the store before rank 0 closes it
      if (rank == 1) {
        const auto until = std::chrono::steady_clock::now() + kReportBound;
        while (reports.count() == 0 && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(milliseconds(20));
        }
      }
      if (rank == 0) comm.reset();  // the store goes with rank 0's communicator
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_EQ(reports.count(), 1u);
  EXPECT_EQ(reports.messages[0].rfind("rank 0 (host of the rendezvous store at 127.0.0.1:", 0), 0u)
      << reports.messages[0];
  EXPECT_NE(reports.messages[0].find(") ended the job: its store closed 0.5 s ago"),
            std::string::npos)
      << reports.messages[0];
}

TEST(Heartbeat, TimeoutMustBePositive) {
  EXPECT_THROW(Heartbeat(testing::loopback_world(0, 2, 1), {milliseconds(0), {}}), UsageError);
}

}  // namespace
}  // namespace zoff::dist::heartbeat_test
