// SingleComm: the one-rank collectives are copies, with the same argument rules as GlooComm.
#include "zoff/dist/single_comm.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"

namespace zoff::dist::single_comm_test {
namespace {

TEST(SingleComm, CollectivesAreLocalCopies) {
  SingleComm comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  auto t = torch::arange(7, torch::kFloat);
  auto work = comm.all_reduce_sum(t);
  EXPECT_TRUE(work->done());
  work->wait();
  EXPECT_TRUE(torch::equal(t, torch::arange(7, torch::kFloat)));

  auto bf16 = torch::randn({1001}).to(torch::kBFloat16);
  auto as_fp32 = torch::empty({1001});
  comm.reduce_scatter_sum(bf16, as_fp32)->wait();
  EXPECT_TRUE(torch::equal(as_fp32, bf16.to(torch::kFloat)));

  auto gathered = torch::zeros({1001}, torch::kBFloat16);
  comm.all_gather(bf16, gathered)->wait();
  EXPECT_TRUE(torch::equal(gathered, bf16));

  comm.broadcast(t, 0)->wait();
  comm.barrier();
}

TEST(SingleComm, RejectsWhatGlooWouldReject) {
  SingleComm comm;
  EXPECT_THROW(comm.all_reduce_sum(torch::ones({3}, torch::kHalf)), Error);
  EXPECT_THROW(comm.broadcast(torch::ones({3}), 1), Error);
  EXPECT_THROW(comm.reduce_scatter_sum(torch::ones({4}), torch::ones({3})), Error);
  EXPECT_THROW(comm.all_gather(torch::ones({3}), torch::ones({3}, torch::kInt)), Error);
  EXPECT_THROW(comm.all_reduce_sum(torch::Tensor()), Error);
}

}  // namespace
}  // namespace zoff::dist::single_comm_test
