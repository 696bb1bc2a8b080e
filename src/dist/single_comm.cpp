// SingleComm: the one-rank communicator; collectives are copies or nothing.
#include "zoff/dist/single_comm.h"

#include "collective_checks.h"
#include "completed_work.h"

namespace zoff::dist {

WorkPtr SingleComm::all_reduce_sum(torch::Tensor tensor) {
  flat_view(tensor, "all_reduce_sum", "tensor");
  check_reducible(tensor.scalar_type(), "all_reduce_sum");
  return std::make_shared<CompletedWork>();
}

WorkPtr SingleComm::reduce_scatter_sum(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum", "input");
  auto out = flat_view(output, "reduce_scatter_sum", "output");
  check_reduce_scatter(in, out, 1);
  sum_in_rank_order(in, 1, out, /*parallel=*/true);
  return std::make_shared<CompletedWork>();
}

WorkPtr SingleComm::reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                                         torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum_v", "input");
  auto out = flat_view(output, "reduce_scatter_sum_v", "output");
  check_reduce_scatter_v(in, split_sizes, out, 1, 0);
  sum_in_rank_order(in, 1, out, /*parallel=*/true);
  return std::make_shared<CompletedWork>();
}

WorkPtr SingleComm::all_gather(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "all_gather", "input");
  auto out = flat_view(output, "all_gather", "output");
  check_all_gather(in, out, 1);
  if (!out.is_same(in) && out.data_ptr() != in.data_ptr()) out.copy_(in);
  return std::make_shared<CompletedWork>();
}

WorkPtr SingleComm::broadcast(torch::Tensor tensor, int root) {
  flat_view(tensor, "broadcast", "tensor");
  check_root(root, 1, "broadcast");
  return std::make_shared<CompletedWork>();
}

}  // namespace zoff::dist
