// Every communicator's collectives on 1-3 ranks (threads of this process) against sums computed
// here, plus bad arguments and timeouts: Gloo over TCP, and shared memory with the default slots
// and with slots so small that every call takes many rounds.

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "rank_threads.h"
#include "zoff/core/error.h"
#include "zoff/dist/shm_comm.h"

namespace zoff::dist::collectives_test {
namespace {

using std::chrono::milliseconds;
using testing::message_of;

struct Transported {
  const char* name;
  CommOptions options;
};

// Runs each test over one transport; run/run_ok are testing::run_ranks(_ok) with its options.
class Collectives : public ::testing::TestWithParam<Transported> {
 protected:
  static void run_ok(int world, const std::function<void(Comm&, int)>& fn) {
    testing::run_ranks_ok(world, fn, GetParam().options);
  }
  static std::vector<std::exception_ptr> run(int world, milliseconds timeout,
                                             const std::function<void(Comm&, int)>& fn) {
    return testing::run_ranks(world, timeout, fn, {}, GetParam().options);
  }
};

// 64-byte slots: a 3-rank fp32 reduce-scatter moves 5 elements per piece per round.
constexpr int64_t kTinySlotBytes = 64;

INSTANTIATE_TEST_SUITE_P(
    Transports, Collectives,
    ::testing::Values(Transported{"Gloo", {Transport::kGloo, ShmComm::kDefaultSlotBytes}},
                      Transported{"Shm", {Transport::kShm, ShmComm::kDefaultSlotBytes}},
                      Transported{"ShmTinySlots", {Transport::kShm, kTinySlotBytes}}),
    [](const ::testing::TestParamInfo<Transported>& info) { return info.param.name; });

// fp32 sums of up to 3 terms in another order differ by a few ulps of the largest term.
constexpr double kSumRtol = 1e-6;
constexpr double kSumAtol = 1e-6;

const int kWorldSizes[] = {1, 2, 3};
const int64_t kCounts[] = {1, 7, 1001};  // elements per rank: a single one, odd, larger and odd

// Rank r's data for a test: distinct per rank, seeded so every run sees the same numbers.
torch::Tensor rank_data(int rank, int64_t numel, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + rank * 7919 + numel);
  if (c10::isFloatingType(dtype)) return torch::randn({numel}, gen).to(dtype);
  if (dtype == torch::kBool) return torch::randint(0, 2, {numel}, gen).to(dtype);
  return torch::randint(-1000, 1000, {numel}, gen).to(dtype);
}

TEST_P(Collectives, AllReduceSumMatchesSumOfRankInputs) {
  for (int world : kWorldSizes) {
    for (int64_t n : kCounts) {
      for (auto dtype : {torch::kFloat, torch::kDouble, torch::kInt, torch::kLong}) {
        std::vector<torch::Tensor> results(world);
        auto reference = torch::zeros({n}, torch::kDouble);
        for (int r = 0; r < world; ++r) reference += rank_data(r, n, dtype).to(torch::kDouble);
        run_ok(world, [&](Comm& comm, int rank) {
          auto t = rank_data(rank, n, dtype);
          comm.all_reduce_sum(t)->wait();
          results[rank] = t;
        });
        for (int r = 0; r < world; ++r) {
          SCOPED_TRACE(::testing::Message()
                       << "world " << world << " n " << n << " dtype " << dtype << " rank " << r);
          ASSERT_TRUE(results[r].defined());
          EXPECT_TRUE(
              torch::allclose(results[r].to(torch::kDouble), reference, kSumRtol, kSumAtol));
          EXPECT_TRUE(torch::equal(results[r], results[0])) << "ranks disagree bitwise";
        }
      }
    }
  }
}

// The left-to-right fp32 sum of chunk `chunk` over ranks: what reduce_scatter_sum promises bit
// for bit, computed here with plain tensor arithmetic.
torch::Tensor rank_order_sum(const std::vector<torch::Tensor>& inputs, int chunk, int64_t n) {
  auto sum = inputs[0].narrow(0, chunk * n, n).to(torch::kFloat);
  for (size_t r = 1; r < inputs.size(); ++r)
    sum = sum + inputs[r].narrow(0, chunk * n, n).to(torch::kFloat);
  return sum;
}

TEST_P(Collectives, ReduceScatterSumIsTheRankOrderSumOnEveryRank) {
  for (int world : kWorldSizes) {
    for (int64_t n : kCounts) {
      for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        std::vector<torch::Tensor> inputs;
        for (int r = 0; r < world; ++r) inputs.push_back(rank_data(r, world * n, dtype));
        std::vector<torch::Tensor> first(world), second(world), gathered(world);
        run_ok(world, [&](Comm& comm, int rank) {
          for (auto* out : {&first, &second}) {
            auto output = torch::full({n}, -1.0f);  // fp32 output even for bf16 input
            comm.reduce_scatter_sum(inputs[rank].clone(), output)->wait();
            (*out)[rank] = output;
          }
          auto all = torch::empty({world * n});
          comm.all_gather(first[rank], all)->wait();
          gathered[rank] = all;
        });
        for (int r = 0; r < world; ++r) {
          SCOPED_TRACE(::testing::Message()
                       << "world " << world << " n " << n << " dtype " << dtype << " rank " << r);
          auto exact = rank_order_sum(inputs, r, n);
          EXPECT_TRUE(torch::equal(first[r], exact)) << "not the left-to-right fp32 sum";
          EXPECT_TRUE(torch::equal(second[r], first[r])) << "two runs differ";
          // Independent of the order: torch's own sum over the stacked inputs in fp64.
          auto stacked = torch::stack(inputs).to(torch::kDouble).narrow(1, r * n, n);
          EXPECT_TRUE(
              torch::allclose(first[r].to(torch::kDouble), stacked.sum(0), kSumRtol, kSumAtol));
          EXPECT_TRUE(torch::equal(gathered[r], gathered[0])) << "ranks disagree bitwise";
        }
      }
    }
  }
}

TEST_P(Collectives, ReduceScatterIntoBf16OutputRoundsTheFp32Sum) {
  const int world = 2;
  const int64_t n = 7;
  std::vector<torch::Tensor> inputs;
  for (int r = 0; r < world; ++r) inputs.push_back(rank_data(r, world * n, torch::kBFloat16));
  std::vector<torch::Tensor> results(world);
  run_ok(world, [&](Comm& comm, int rank) {
    auto output = torch::empty({n}, torch::kBFloat16);
    comm.reduce_scatter_sum(inputs[rank], output)->wait();
    results[rank] = output;
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(torch::equal(results[r], rank_order_sum(inputs, r, n).to(torch::kBFloat16)));
  }
}

TEST_P(Collectives, UnevenReduceScatterGivesEachRankTheRankOrderSumOfItsPiece) {
  // Pieces as the engine's buckets cut them: empty ones, single elements, odd lengths.
  const std::vector<std::vector<int64_t>> splits_by_world[] = {
      {{5}},
      {{7, 1}, {0, 1001}, {3, 3}},
      {{1, 7, 1001}, {5, 0, 2}, {0, 0, 9}},
  };
  for (int world : kWorldSizes) {
    for (const auto& splits : splits_by_world[world - 1]) {
      for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        int64_t total = 0;
        for (auto s : splits) total += s;
        std::vector<torch::Tensor> inputs;
        for (int r = 0; r < world; ++r) inputs.push_back(rank_data(r, total, dtype));
        std::vector<torch::Tensor> results(world);
        run_ok(world, [&](Comm& comm, int rank) {
          auto output = torch::full({splits[rank]}, -1.0f);
          comm.reduce_scatter_sum_v(inputs[rank], splits, output)->wait();
          results[rank] = output;
        });
        int64_t offset = 0;
        for (int r = 0; r < world; ++r) {
          SCOPED_TRACE(::testing::Message() << "world " << world << " rank " << r << " dtype "
                                            << dtype << " piece " << splits[r]);
          auto exact = inputs[0].narrow(0, offset, splits[r]).to(torch::kFloat);
          for (int q = 1; q < world; ++q) {
            exact = exact + inputs[q].narrow(0, offset, splits[r]).to(torch::kFloat);
          }
          EXPECT_TRUE(torch::equal(results[r], exact));
          auto stacked = torch::stack(inputs).to(torch::kDouble).narrow(1, offset, splits[r]);
          EXPECT_TRUE(
              torch::allclose(results[r].to(torch::kDouble), stacked.sum(0), kSumRtol, kSumAtol));
          offset += splits[r];
        }
      }
    }
  }
}

TEST_P(Collectives, UnevenReduceScatterRejectsSplitsThatDoNotCoverTheInput) {
  auto errors = run(2, std::chrono::seconds(10), [&](Comm& comm, int rank) {
    EXPECT_THROW(comm.reduce_scatter_sum_v(torch::ones({8}), {3, 4}, torch::ones({rank ? 4 : 3})),
                 Error);
    EXPECT_THROW(comm.reduce_scatter_sum_v(torch::ones({8}), {8}, torch::ones({8})), Error);
    EXPECT_THROW(comm.reduce_scatter_sum_v(torch::ones({8}), {9, -1}, torch::ones({rank ? 1 : 9})),
                 Error);
    EXPECT_THROW(comm.reduce_scatter_sum_v(torch::ones({8}), {3, 5}, torch::ones({4})), Error);
  });
  for (auto& e : errors) EXPECT_FALSE(e) << message_of(e);
}

TEST_P(Collectives, AllGatherPlacesEachRanksBytesInItsSlot) {
  for (int world : kWorldSizes) {
    for (int64_t n : kCounts) {
      for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble,
                         torch::kLong, torch::kBool}) {
        std::vector<torch::Tensor> results(world);
        run_ok(world, [&](Comm& comm, int rank) {
          auto output = torch::zeros({world * n}, dtype);
          comm.all_gather(rank_data(rank, n, dtype), output)->wait();
          results[rank] = output;
        });
        std::vector<torch::Tensor> parts;
        for (int r = 0; r < world; ++r) parts.push_back(rank_data(r, n, dtype));
        const auto expected = torch::cat(parts);
        for (int r = 0; r < world; ++r) {
          SCOPED_TRACE(::testing::Message()
                       << "world " << world << " n " << n << " dtype " << dtype << " rank " << r);
          EXPECT_TRUE(torch::equal(results[r], expected));
        }
      }
    }
  }
}

TEST_P(Collectives, AllGatherAcceptsTheOwnSlotOfTheOutputAsInput) {
  // The engine gathers 16-bit shards into a flat buffer whose own slot already holds the shard.
  const int world = 3;
  const int64_t n = 1001;
  std::vector<torch::Tensor> results(world);
  run_ok(world, [&](Comm& comm, int rank) {
    auto flat = torch::zeros({world * n}, torch::kBFloat16);
    flat.narrow(0, rank * n, n).copy_(rank_data(rank, n, torch::kBFloat16));
    comm.all_gather(flat.narrow(0, rank * n, n), flat)->wait();
    results[rank] = flat;
  });
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < world; ++r) parts.push_back(rank_data(r, n, torch::kBFloat16));
  for (int r = 0; r < world; ++r) EXPECT_TRUE(torch::equal(results[r], torch::cat(parts)));
}

TEST_P(Collectives, BroadcastCopiesTheRootsTensorToEveryRank) {
  for (int world : kWorldSizes) {
    for (int root : {0, world - 1}) {
      for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kInt}) {
        const int64_t n = 7;
        std::vector<torch::Tensor> results(world);
        run_ok(world, [&](Comm& comm, int rank) {
          auto t = rank_data(rank, n, dtype);
          comm.broadcast(t, root)->wait();
          results[rank] = t;
        });
        for (int r = 0; r < world; ++r) {
          SCOPED_TRACE(::testing::Message() << "world " << world << " root " << root << " rank "
                                            << r << " dtype " << dtype);
          EXPECT_TRUE(torch::equal(results[r], rank_data(root, n, dtype)));
        }
      }
    }
  }
}

TEST_P(Collectives, BarrierWaitsForTheSlowestRank) {
  constexpr auto kDelay = milliseconds(400);
  std::vector<double> waited_ms(2);
  run_ok(2, [&](Comm& comm, int rank) {
    if (rank == 1) std::this_thread::sleep_for(kDelay);
    const auto start = std::chrono::steady_clock::now();
    comm.barrier();
    waited_ms[rank] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  });
  // Rank 0 reached the barrier ~400 ms before rank 1 (minus the time rank 1 spent getting there).
  EXPECT_GT(waited_ms[0], 200.0);
}

TEST_P(Collectives, DoneTurnsTrueWithoutWaitAndThenWaitReturnsTheResult) {
  std::vector<torch::Tensor> results(2);
  run_ok(2, [&](Comm& comm, int rank) {
    auto input = torch::full({2 * 5}, static_cast<float>(rank + 1));
    auto output = torch::zeros({5});
    auto work = comm.reduce_scatter_sum(input, output);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!work->done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    EXPECT_TRUE(work->done());
    results[rank] = output.clone();  // done() promises the output is ready before wait()
    work->wait();
  });
  for (auto& r : results) EXPECT_TRUE(torch::equal(r, torch::full({5}, 3.0f)));
}

TEST_P(Collectives, Bf16AllReduceIsAClearErrorNotAUsageError) {
  for (int world : {1, 2}) {
    auto errors = run(world, std::chrono::seconds(10), [&](Comm& comm, int) {
      comm.all_reduce_sum(torch::ones({4}, torch::kBFloat16));
    });
    for (auto& e : errors) {
      ASSERT_TRUE(e) << "world " << world;
      EXPECT_NE(message_of(e).find("BFloat16"), std::string::npos) << message_of(e);
      EXPECT_NE(message_of(e).find("fp32"), std::string::npos) << message_of(e);
      try {
        std::rethrow_exception(e);
      } catch (const UsageError&) {
        ADD_FAILURE() << "a dtype the backend cannot sum is not the user's input";
      } catch (const Error&) {
      }
    }
  }
}

TEST_P(Collectives, MismatchedShapesAndRootsThrowBeforeAnythingIsSent) {
  for (int world : {1, 2}) {
    auto errors = run(world, std::chrono::seconds(10), [&](Comm& comm, int) {
      EXPECT_THROW(comm.reduce_scatter_sum(torch::ones({world * 3 + 1}), torch::ones({3})), Error);
      EXPECT_THROW(comm.all_gather(torch::ones({3}), torch::ones({world * 3 + 1})), Error);
      EXPECT_THROW(comm.all_gather(torch::ones({3}), torch::ones({world * 3}, torch::kDouble)),
                   Error);
      EXPECT_THROW(comm.broadcast(torch::ones({3}), world), Error);
      EXPECT_THROW(comm.all_reduce_sum(torch::ones({4, 4}).t()), Error);  // not contiguous
      EXPECT_THROW(comm.reduce_scatter_sum(torch::ones({world * 2}, torch::kBFloat16),
                                           torch::ones({2}, torch::kDouble)),
                   Error);
    });
    for (auto& e : errors) EXPECT_FALSE(e) << message_of(e);
  }
}

TEST_P(Collectives, ACollectiveOneRankNeverCallsTimesOutWithANamedError) {
  // The timeout covers the rendezvous too, which can take seconds when ctest -j2 loads both
  // cores.
  constexpr auto kTimeout = milliseconds(4000);
  std::mutex mutex;
  std::condition_variable cv;
  bool rank0_finished = false;
  std::string message;
  double elapsed_s = 0;
  auto errors = run(2, kTimeout, [&](Comm& comm, int rank) {
    if (rank == 1) {  // stays alive, but never joins the all-reduce
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait_for(lock, std::chrono::seconds(60), [&] { return rank0_finished; });
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      comm.all_reduce_sum(torch::ones({16}))->wait();
    } catch (const Error& e) {
      message = e.what();
    }
    elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(mutex);
    rank0_finished = true;
    cv.notify_all();
  });
  for (auto& e : errors) EXPECT_FALSE(e) << message_of(e);
  EXPECT_NE(message.find("all_reduce_sum"), std::string::npos) << message;
  EXPECT_NE(message.find("4000 ms"), std::string::npos) << message;
  EXPECT_LT(elapsed_s, 4.0 + 3.0) << "bounded by the timeout plus scheduling slack";
}

}  // namespace
}  // namespace zoff::dist::collectives_test
