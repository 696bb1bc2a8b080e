// ShmComm's own behaviour: when init_comm picks it, the segment's lifetime, bad sizes, and
// shutting down while a collective waits (its collectives are in collectives_test.cpp).
#include "zoff/dist/shm_comm.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "rank_threads.h"
#include "zoff/core/error.h"
#include "zoff/dist/single_comm.h"

namespace zoff::dist::shm_comm_test {
namespace {

using std::chrono::milliseconds;
using testing::message_of;
using testing::run_ranks;
using testing::run_ranks_ok;

// Names of this process's segments in /dev/shm: they must never outlive the rendezvous.
int segments_of_this_process() {
  const std::string prefix = "zoff-" + std::to_string(getpid()) + "-";
  int found = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ignored)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) ++found;
  }
  return found;
}

// Runs init_comm on `size` rank threads whose WorldInfo `adjust` may change; returns each
// rank's backend name or its error message.
std::vector<std::string> backends(int size, const CommOptions& options,
                                  const std::function<void(WorldInfo&)>& adjust = {}) {
  const int port = pick_free_port();
  std::vector<std::string> result(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto world = testing::loopback_world(r, size, port);
      if (adjust) adjust(world);
      try {
        result[static_cast<size_t>(r)] =
            init_comm(world, std::chrono::seconds(20), options)->backend();
      } catch (const std::exception& e) {
        result[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

TEST(ShmComm, RanksOnOneHostTalkThroughSharedMemoryUnlessGlooIsAsked) {
  for (auto [transport, expected] :
       {std::pair{Transport::kAuto, "shm"}, std::pair{Transport::kShm, "shm"},
        std::pair{Transport::kGloo, "gloo"}}) {
    for (const auto& name : backends(3, {transport, ShmComm::kDefaultSlotBytes})) {
      EXPECT_EQ(name, expected);
    }
  }
}

TEST(ShmComm, RanksOnSeveralHostsKeepGlooAndRequiringShmNamesTheLayout) {
  const auto two_hosts = [](WorldInfo& world) {
    world.local_world_size = 1;
    world.local_rank = 0;
  };
  for (const auto& name : backends(2, {}, two_hosts)) EXPECT_EQ(name, "gloo");
  for (const auto& message :
       backends(2, {Transport::kShm, ShmComm::kDefaultSlotBytes}, two_hosts)) {
    EXPECT_NE(message.find("ZOFF_COMM_TRANSPORT=shm needs ranks that share a host"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("LOCAL_WORLD_SIZE=1"), std::string::npos) << message;
  }
}

TEST(ShmComm, TheTransportComesFromZoffCommTransport) {
  setenv("ZOFF_COMM_TRANSPORT", "gloo", 1);
  EXPECT_EQ(CommOptions::from_env().transport, Transport::kGloo);
  setenv("ZOFF_COMM_TRANSPORT", "shm", 1);
  EXPECT_EQ(CommOptions::from_env().transport, Transport::kShm);
  setenv("ZOFF_COMM_TRANSPORT", "auto", 1);
  EXPECT_EQ(CommOptions::from_env().transport, Transport::kAuto);
  setenv("ZOFF_COMM_TRANSPORT", "tcp", 1);
  try {
    CommOptions::from_env();
    ADD_FAILURE() << "ZOFF_COMM_TRANSPORT=tcp was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ZOFF_COMM_TRANSPORT='tcp'"), std::string::npos);
  }
  unsetenv("ZOFF_COMM_TRANSPORT");
  EXPECT_EQ(CommOptions::from_env().transport, Transport::kAuto);
}

TEST(ShmComm, SlotSizesThatAreNotMultiplesOf64AreUsageErrors) {
  for (int64_t bytes : {int64_t{0}, int64_t{-64}, int64_t{100}}) {
    EXPECT_THROW(
        ShmComm::connect(std::make_shared<SingleComm>(), milliseconds(1000), bytes, nullptr),
        UsageError)
        << bytes;
  }
}

TEST(ShmComm, NoSegmentNameOutlivesTheRendezvous) {
  run_ranks_ok(2, [&](Comm& comm, int) {
    comm.barrier();  // both ranks are connected: rank 0 has removed the name by now
    EXPECT_EQ(comm.backend(), "shm");
    EXPECT_EQ(segments_of_this_process(), 0);
  });
}

TEST(ShmComm, ASegmentDevShmCannotHoldFallsBackToGlooOrFailsWhenShmIsRequired) {
  // 2 banks x 2 ranks x 1 TiB: more than any /dev/shm here; refused before a page is touched.
  constexpr int64_t kHugeSlot = int64_t{1} << 40;
  for (const auto& name : backends(2, {Transport::kAuto, kHugeSlot})) EXPECT_EQ(name, "gloo");
  for (const auto& message : backends(2, {Transport::kShm, kHugeSlot})) {
    EXPECT_NE(message.find("ZOFF_COMM_TRANSPORT=shm: "), std::string::npos) << message;
  }
  EXPECT_EQ(segments_of_this_process(), 0);
}

TEST(ShmComm, ASharedTensorIsOneMemoryEveryRankWritesAndReads) {
  constexpr int kWorld = 3;
  constexpr int64_t kNumel = 1001;  // not a multiple of anything the segment rounds to
  run_ranks_ok(kWorld, [&](Comm& comm, int rank) {
    std::string why_not;
    auto shared = comm.shared_tensor(kNumel, torch::kBFloat16, &why_not);
    ASSERT_TRUE(shared.defined()) << why_not;
    EXPECT_EQ(shared.numel(), kNumel);
    EXPECT_EQ(shared.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(shared.count_nonzero().item<int64_t>(), 0);  // zero-filled
    comm.barrier();  // every rank has returned: rank 0 has removed the name by now
    EXPECT_EQ(segments_of_this_process(), 0);
    // Each rank writes its third; after the barrier every rank reads all three.
    const int64_t piece = (kNumel + kWorld - 1) / kWorld;
    const int64_t begin = rank * piece;
    shared.narrow(0, begin, std::min(piece, kNumel - begin)).fill_(rank + 1);
    comm.barrier();
    for (int r = 0; r < kWorld; ++r) {
      const int64_t at = r * piece;
      EXPECT_EQ(shared.narrow(0, at, std::min(piece, kNumel - at))
                    .to(torch::kFloat32)
                    .sum()
                    .item<float>(),
                static_cast<float>((r + 1) * std::min(piece, kNumel - at)))
          << "rank " << rank << " reading rank " << r << "'s piece";
    }
    comm.barrier();
  });
}

TEST(ShmComm, ASharedTensorDevShmCannotHoldIsRefusedOnEveryRankWithTheReason) {
  run_ranks_ok(2, [&](Comm& comm, int) {
    std::string why_not;
    // 2^42 bytes: more than any /dev/shm here; refused before a page is touched.
    auto shared = comm.shared_tensor(int64_t{1} << 41, torch::kBFloat16, &why_not);
    EXPECT_FALSE(shared.defined());
    EXPECT_NE(why_not.find("shared memory"), std::string::npos) << why_not;
    // The communicator is still usable, and nothing was left in /dev/shm.
    auto ones = torch::ones({4});
    comm.all_reduce_sum(ones)->wait();
    EXPECT_EQ(ones.sum().item<float>(), 8.0f);
    EXPECT_EQ(segments_of_this_process(), 0);
  });
}

TEST(ShmComm, GlooAndASingleRankShareNoMemoryAndSaySo) {
  std::string why_not;
  EXPECT_FALSE(SingleComm().shared_tensor(8, torch::kFloat32, &why_not).defined());
  EXPECT_EQ(why_not, "the single transport shares no memory");
  run_ranks_ok(2,
               [&](Comm& comm, int) {
                 std::string reason;
                 EXPECT_FALSE(comm.shared_tensor(8, torch::kFloat32, &reason).defined());
                 EXPECT_EQ(reason, "the gloo transport shares no memory");
               },
               {Transport::kGloo, ShmComm::kDefaultSlotBytes});
}

TEST(ShmComm, DestroyingTheCommunicatorAbandonsAWaitingCollectiveAtOnce) {
  const int port = pick_free_port();
  std::atomic<bool> rank0_done{false};
  double destroy_s = -1;
  std::string message;
  std::thread peer([&] {
    auto comm = init_comm(testing::loopback_world(1, 2, port), std::chrono::seconds(60));
    while (!rank0_done) std::this_thread::sleep_for(milliseconds(10));
  });
  {
    auto comm = init_comm(testing::loopback_world(0, 2, port), std::chrono::seconds(60));
    auto work = comm->all_reduce_sum(torch::ones({4}));  // rank 1 never joins
    std::this_thread::sleep_for(milliseconds(200));
    const auto start = std::chrono::steady_clock::now();
    comm.reset();
    destroy_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    try {
      work->wait();
    } catch (const Error& e) {
      message = e.what();
    }
  }
  rank0_done = true;
  peer.join();
  EXPECT_LT(destroy_s, 5.0) << "not the 60 s timeout";
  EXPECT_NE(message.find("all_reduce_sum (shm, rank 0 of 2)"), std::string::npos) << message;
  EXPECT_NE(message.find("shutting down"), std::string::npos) << message;
}

TEST(ShmComm, ACollectiveAfterAFailedOneFailsAtOnceWithTheFirstError) {
  std::atomic<bool> rank0_done{false};
  // The timeout covers the rendezvous too, which took over 5 s once when ctest -j2 ran other
  // rendezvous beside it; rank 0's first all-reduce waits it out.
  auto errors = run_ranks(
      2, milliseconds(10000),
      [&](Comm& comm, int rank) {
        if (rank == 1) {  // stays connected but misses rank 0's collective
          while (!rank0_done) std::this_thread::sleep_for(milliseconds(10));
          return;
        }
        EXPECT_THROW(comm.all_reduce_sum(torch::ones({4}))->wait(), Error);
        const auto start = std::chrono::steady_clock::now();
        try {
          comm.all_gather(torch::ones({2}), torch::ones({4}))->wait();
          ADD_FAILURE() << "a collective ran on a broken exchange";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("all_reduce_sum"), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                  0.5);
        rank0_done = true;
      },
      {}, {Transport::kShm, ShmComm::kDefaultSlotBytes});
  for (auto& e : errors) EXPECT_FALSE(e) << message_of(e);
}

}  // namespace
}  // namespace zoff::dist::shm_comm_test
