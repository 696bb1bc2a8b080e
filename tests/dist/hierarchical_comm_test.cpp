// Ranks on several "hosts" (threads of this process that say so through LOCAL_WORLD_SIZE): shared
// memory within a host and Gloo between hosts, against sums computed here in the documented
// order (each host's ranks left to right, then the hosts left to right, in fp32).

#include "zoff/dist/hierarchical_comm.h"

#include <gtest/gtest.h>

#include "rank_threads.h"
#include "zoff/core/error.h"

namespace zoff::dist::hierarchical_comm_test {
namespace {

using std::chrono::milliseconds;
using testing::message_of;

// fp32 sums of up to 6 terms in another order differ by a few ulps of the largest term.
constexpr double kSumRtol = 1e-6;
constexpr double kSumAtol = 1e-6;

struct Layout {
  int hosts;
  int locals;  // ranks per host
  int world() const { return hosts * locals; }
  std::function<void(WorldInfo&)> adjust() const {
    const int l = locals;
    return [l](WorldInfo& world) {
      world.local_world_size = l;
      world.local_rank = world.rank % l;
    };
  }
};

const Layout kLayouts[] = {{2, 2}, {3, 2}, {2, 3}};

void run_ok(const Layout& layout, const std::function<void(Comm&, int)>& fn,
            CommOptions options = {}) {
  testing::run_ranks_ok(layout.world(), fn, options, layout.adjust());
}

torch::Tensor rank_data(int rank, int64_t numel, torch::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(2000 + rank * 7919 + numel);
  if (c10::isFloatingType(dtype)) return torch::randn({numel}, gen).to(dtype);
  return torch::randint(-1000, 1000, {numel}, gen).to(dtype);
}

// The documented order for elements [offset, offset + n) of every rank's input: per host, its
// ranks left to right in fp32; then the hosts' partials left to right.
torch::Tensor host_order_sum(const std::vector<torch::Tensor>& inputs, const Layout& layout,
                             int64_t offset, int64_t n) {
  const auto acc = inputs[0].is_floating_point() ? torch::kFloat : inputs[0].scalar_type();
  torch::Tensor total;
  for (int h = 0; h < layout.hosts; ++h) {
    torch::Tensor partial;
    for (int l = 0; l < layout.locals; ++l) {
      auto piece = inputs[static_cast<size_t>(h * layout.locals + l)].narrow(0, offset, n).to(acc);
      partial = partial.defined() ? partial + piece : piece;
    }
    total = total.defined() ? total + partial : partial;
  }
  return total;
}

TEST(HierarchicalComm, SeveralRanksOnEachOfSeveralHostsTalkThroughShmAndGloo) {
  for (const Layout& layout : kLayouts) {
    std::vector<std::string> names(static_cast<size_t>(layout.world()));
    run_ok(layout,
           [&](Comm& comm, int rank) { names[static_cast<size_t>(rank)] = comm.backend(); });
    for (const auto& name : names) EXPECT_EQ(name, "shm+gloo");
  }
  // One rank per host shares nothing; ZOFF_COMM_TRANSPORT=gloo keeps the flat mesh.
  std::vector<std::string> names(4);
  testing::run_ranks_ok(
      4, [&](Comm& comm, int rank) { names[static_cast<size_t>(rank)] = comm.backend(); }, {},
      Layout{4, 1}.adjust());
  for (const auto& name : names) EXPECT_EQ(name, "gloo");
  run_ok({2, 2}, [&](Comm& comm, int rank) { names[static_cast<size_t>(rank)] = comm.backend(); },
         {Transport::kGloo, int64_t{2} << 20});
  for (const auto& name : names) EXPECT_EQ(name, "gloo");
}

TEST(HierarchicalComm, UnevenReduceScatterIsTheHostOrderSumOfEachPiece) {
  for (const Layout& layout : kLayouts) {
    const int world = layout.world();
    // Pieces as the engine's buckets cut them: empty ones, single elements, odd lengths.
    std::vector<int64_t> splits;
    for (int r = 0; r < world; ++r) splits.push_back(r % 3 == 1 ? 0 : (r * 37 + 1) % 101);
    int64_t total = 0;
    for (auto s : splits) total += s;
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
      for (auto out_dtype : {torch::kFloat, dtype}) {
        std::vector<torch::Tensor> inputs;
        for (int r = 0; r < world; ++r) inputs.push_back(rank_data(r, total, dtype));
        std::vector<torch::Tensor> results(static_cast<size_t>(world));
        run_ok(layout, [&](Comm& comm, int rank) {
          auto output = torch::full({splits[static_cast<size_t>(rank)]}, -1.0f).to(out_dtype);
          comm.reduce_scatter_sum_v(inputs[static_cast<size_t>(rank)], splits, output)->wait();
          results[static_cast<size_t>(rank)] = output;
        });
        int64_t offset = 0;
        for (int r = 0; r < world; ++r) {
          const int64_t n = splits[static_cast<size_t>(r)];
          SCOPED_TRACE(::testing::Message()
                       << layout.hosts << " hosts x " << layout.locals << ", rank " << r << ", "
                       << dtype << " -> " << out_dtype << ", piece " << n);
          auto exact = host_order_sum(inputs, layout, offset, n).to(out_dtype);
          EXPECT_TRUE(torch::equal(results[static_cast<size_t>(r)], exact));
          auto stacked = torch::stack(inputs).to(torch::kDouble).narrow(1, offset, n).sum(0);
          if (out_dtype == torch::kFloat) {
            EXPECT_TRUE(torch::allclose(results[static_cast<size_t>(r)].to(torch::kDouble), stacked,
                                        kSumRtol, kSumAtol));
          }
          offset += n;
        }
      }
    }
  }
}

TEST(HierarchicalComm, AllGatherPlacesEachRanksBytesInItsSlot) {
  for (const Layout& layout : kLayouts) {
    const int world = layout.world();
    const int64_t n = 13;
    std::vector<torch::Tensor> results(static_cast<size_t>(world));
    run_ok(layout, [&](Comm& comm, int rank) {
      auto output = torch::empty({world * n}, torch::kBFloat16);
      // The input is this rank's own slot of the output, as the engine passes it.
      output.narrow(0, rank * n, n).copy_(rank_data(rank, n, torch::kBFloat16));
      comm.all_gather(output.narrow(0, rank * n, n), output)->wait();
      results[static_cast<size_t>(rank)] = output;
    });
    for (int r = 0; r < world; ++r) {
      for (int q = 0; q < world; ++q) {
        EXPECT_TRUE(torch::equal(results[static_cast<size_t>(r)].narrow(0, q * n, n),
                                 rank_data(q, n, torch::kBFloat16)))
            << layout.hosts << "x" << layout.locals << ": rank " << r << "'s slot " << q;
      }
    }
  }
}

TEST(HierarchicalComm, AllReduceIsTheSameHostOrderSumOnEveryRank) {
  const Layout layout{3, 2};
  const int world = layout.world();
  for (auto dtype : {torch::kFloat, torch::kInt}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1001}}) {
      std::vector<torch::Tensor> inputs, results(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) inputs.push_back(rank_data(r, n, dtype));
      run_ok(layout, [&](Comm& comm, int rank) {
        auto t = inputs[static_cast<size_t>(rank)].clone();
        comm.all_reduce_sum(t)->wait();
        results[static_cast<size_t>(rank)] = t;
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(torch::equal(results[static_cast<size_t>(r)],
                                 host_order_sum(inputs, layout, 0, n).to(dtype)))
            << dtype << " n " << n << " rank " << r;
      }
    }
  }
}

TEST(HierarchicalComm, BroadcastBarrierAndNoSharedTensorAcrossHosts) {
  const Layout layout{2, 2};
  std::vector<torch::Tensor> results(4);
  std::vector<std::string> reasons(4);
  run_ok(layout, [&](Comm& comm, int rank) {
    auto t = torch::full({5}, static_cast<float>(rank));
    comm.broadcast(t, 3)->wait();
    comm.barrier();
    results[static_cast<size_t>(rank)] = t;
    std::string why;
    EXPECT_FALSE(comm.shared_tensor(8, torch::kFloat, &why).defined());
    reasons[static_cast<size_t>(rank)] = why;
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(torch::equal(results[static_cast<size_t>(r)], torch::full({5}, 3.0f)));
    EXPECT_NE(reasons[static_cast<size_t>(r)].find("on 2 hosts"), std::string::npos);
  }
}

TEST(HierarchicalComm, ACollectiveOneRankNeverCallsTimesOutWithANamedError) {
  const Layout layout{2, 2};
  auto errors = testing::run_ranks(
      4, milliseconds(1500),
      [](Comm& comm, int rank) {
        if (rank == 3) return;
        auto out = torch::empty({2});
        comm.reduce_scatter_sum(torch::ones({8}), out)->wait();
      },
      {}, {}, layout.adjust());
  int timed_out = 0;
  for (int r = 0; r < 3; ++r) {
    const std::string message = message_of(errors[static_cast<size_t>(r)]);
    if (message.find("timed out") != std::string::npos) ++timed_out;
    EXPECT_NE(message.find("reduce_scatter_sum"), std::string::npos) << message;
  }
  EXPECT_GE(timed_out, 1);
  EXPECT_FALSE(errors[3]);
}

}  // namespace
}  // namespace zoff::dist::hierarchical_comm_test
