// The communicator for ranks on several hosts with several ranks each: shared memory within a
// host, Gloo between hosts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "zoff/dist/comm.h"

namespace zoff::dist {

class SerialWorker;

// Ranks are laid out host by host, as `zoff launch` and torchrun number them: rank =
// host * L + local rank, L ranks on each of H hosts. Each collective runs in two steps, the
// bulk of the bytes moving through the host's shared segment and only each host's share over
// the network, where a flat Gloo mesh would send every rank's bytes over TCP (loopback for
// peers on the same host):
//
// - reduce_scatter_sum(_v): the ranks of a host reduce-scatter over shared memory, local rank
//   l receiving the host's fp32 partial sums (the accumulate dtype) of the pieces of ranks
//   (0, l), (1, l), ...; then the ranks with local rank l (the "rail" of l, one per host)
//   reduce-scatter those partials over Gloo, each receiving the sum of its piece in host
//   order. The order is fixed: the host's ranks left to right, then the hosts left to right,
//   accumulated in fp32 and rounded once to the output dtype: not bit for bit the flat
//   transports' rank order (a few ulps apart in fp32), but the same on every run.
// - all_gather: over the rail (each rank gets its rail's inputs), then over shared memory.
// - all_reduce_sum: a reduce-scatter of the padded tensor then an all-gather (the same sums).
// - broadcast and barrier: the flat Gloo communicator of all ranks, queued behind this
//   rank's earlier collectives.
//
// Network bytes per host and reduce-scatter: (H - 1) / H of the input in fp32, against
// L * (H - 1) / H of it in the input's dtype over a flat mesh. The host-shared parameter copy
// of stages 1-2 needs every rank's pieces on each host, so shared_tensor is refused (the
// engine keeps its all-gather). Collectives run one after another on a thread of their own
// (every rank issues them in the same order, so the two steps of each stay in step).
class HierarchicalComm final : public Comm {
 public:
  // world: every rank (flat Gloo; it holds the job's store); local: this host's L ranks (shared
  // memory); rail: the H ranks with this local rank, one per host, in host order (Gloo).
  HierarchicalComm(CommPtr world, CommPtr local, CommPtr rail);
  ~HierarchicalComm() override;

  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  int hosts() const { return hosts_; }
  WorkPtr all_reduce_sum(torch::Tensor tensor) override;
  WorkPtr reduce_scatter_sum(torch::Tensor input, torch::Tensor output) override;
  WorkPtr reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                               torch::Tensor output) override;
  WorkPtr all_gather(torch::Tensor input, torch::Tensor output) override;
  WorkPtr broadcast(torch::Tensor tensor, int root) override;
  void barrier() override;
  torch::Tensor shared_tensor(int64_t numel, torch::ScalarType dtype,
                              std::string* why_not) override;
  std::string backend() const override { return "shm+gloo"; }

 private:
  // The two steps of reduce_scatter_sum_v, run on the worker (arguments checked).
  void reduce_scatter_now(const torch::Tensor& input, const std::vector<int64_t>& split_sizes,
                          const torch::Tensor& output);
  void all_gather_now(const torch::Tensor& input, const torch::Tensor& output);

  CommPtr world_, local_, rail_;
  int hosts_ = 1;
  int local_size_ = 1;
  std::unique_ptr<SerialWorker> worker_;  // last: its thread stops before the communicators go
};

}  // namespace zoff::dist
