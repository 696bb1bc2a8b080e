// The communicator of a one-rank job: every collective is a local copy or nothing.
#pragma once

#include "zoff/dist/comm.h"

namespace zoff::dist {

// World size 1, no network. Collectives check their arguments exactly like GlooComm (so
// code that is wrong at N = 2 is already wrong at N = 1) and return completed Work.
class SingleComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  WorkPtr all_reduce_sum(torch::Tensor tensor) override;
  WorkPtr reduce_scatter_sum(torch::Tensor input, torch::Tensor output) override;
  WorkPtr reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                               torch::Tensor output) override;
  WorkPtr all_gather(torch::Tensor input, torch::Tensor output) override;
  WorkPtr broadcast(torch::Tensor tensor, int root) override;
  void barrier() override {}
  std::string backend() const override { return "single"; }
};

}  // namespace zoff::dist
