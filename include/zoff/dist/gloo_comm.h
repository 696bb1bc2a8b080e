// The multi-rank communicator: a c10d TCPStore rendezvous plus a ProcessGroupGloo.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "zoff/dist/comm.h"
#include "zoff/dist/world.h"

namespace zoff::dist {

// reduce_scatter_sum is an alltoall_base (the bytes of a ring reduce-scatter: (N - 1) / N of
// the input per rank each way) followed by a local sum in rank order, accumulated in fp32
// (fp64 for fp64 input): the same sums, bit for bit, as the shared-memory transport's. Gloo's
// own reduce_scatter (PyTorch 2.x) is an all-reduce of the whole input underneath, twice those
// bytes, in an order of its own (measured: docs/figures.md, Communication).
//
// Data moves as raw bytes, so all_gather and broadcast take any dtype (bf16 included).
// Each Work::wait() gives up after the timeout given at construction and throws
// zoff::Error naming the collective; a peer that dies makes the waits fail, not hang.
class GlooComm final : public Comm {
 public:
  // Rendezvous: rank 0 hosts a TCPStore at world.master_addr:world.master_port, every rank
  // checks in, then the Gloo mesh is built. Throws zoff::Error after `timeout` naming the
  // address, the port and how many ranks arrived; a master_addr that does not resolve is a
  // zoff::UsageError at once.
  GlooComm(const WorldInfo& world, std::chrono::milliseconds timeout);
  ~GlooComm() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  WorkPtr all_reduce_sum(torch::Tensor tensor) override;
  WorkPtr reduce_scatter_sum(torch::Tensor input, torch::Tensor output) override;
  // Uneven pieces go through Gloo's alltoallv: the same rank-order fp32 sum, and each
  // rank receives only its own piece from every rank (no all-reduce of the whole input).
  WorkPtr reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                               torch::Tensor output) override;
  WorkPtr all_gather(torch::Tensor input, torch::Tensor output) override;
  WorkPtr broadcast(torch::Tensor tensor, int root) override;
  void barrier() override;
  std::string backend() const override { return "gloo"; }

  // Collective over `members` only (ascending ranks of this communicator, this rank among
  // them; every member calls it with the same name and list): a communicator of those ranks
  // through the same store and network device, its ranks numbered in the order of `members`.
  // `name` keeps its rendezvous keys apart from other groups' and labels its errors
  // ("all_gather (gloo between hosts, local rank 0, rank 1 of 2)").
  std::shared_ptr<GlooComm> subgroup(const std::string& name,
                                     const std::vector<int>& members) const;

 private:
  struct Group;  // c10d objects; kept out of this header so users need no Gloo headers
  GlooComm(std::unique_ptr<Group> group, int rank, int size, std::chrono::milliseconds timeout);
  std::unique_ptr<Group> group_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_;
};

}  // namespace zoff::dist
