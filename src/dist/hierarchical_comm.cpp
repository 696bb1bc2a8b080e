// HierarchicalComm: collectives in two steps, shared memory within a host and Gloo between
// hosts.
#include "zoff/dist/hierarchical_comm.h"

#include "collective_checks.h"
#include "completed_work.h"
#include "serial_worker.h"
#include "zoff/core/error.h"

namespace zoff::dist {

HierarchicalComm::HierarchicalComm(CommPtr world, CommPtr local, CommPtr rail)
    : world_(std::move(world)),
      local_(std::move(local)),
      rail_(std::move(rail)),
      hosts_(rail_->size()),
      local_size_(local_->size()),
      worker_(std::make_unique<SerialWorker>()) {
  ZOFF_CHECK_ARG(hosts_ * local_size_ == world_->size() &&
                     world_->rank() == rail_->rank() * local_size_ + local_->rank(),
                 "HierarchicalComm: rank ", world_->rank(), " of ", world_->size(), " is not host ",
                 rail_->rank(), " of ", hosts_, " x local rank ", local_->rank(), " of ",
                 local_size_);
}

HierarchicalComm::~HierarchicalComm() = default;

void HierarchicalComm::reduce_scatter_now(const torch::Tensor& input,
                                          const std::vector<int64_t>& split_sizes,
                                          const torch::Tensor& output) {
  const int hosts = hosts_;
  const int locals = local_size_;
  // Input pieces regrouped by the local rank that receives them: block j holds the pieces of
  // ranks (0, j), (1, j), ..., (H - 1, j), each in host order.
  std::vector<int64_t> offsets(split_sizes.size() + 1, 0);
  for (size_t r = 0; r < split_sizes.size(); ++r) offsets[r + 1] = offsets[r] + split_sizes[r];
  auto regrouped = torch::empty({input.numel()}, input.options());
  std::vector<int64_t> block_sizes(static_cast<size_t>(locals), 0);
  int64_t at = 0;
  for (int j = 0; j < locals; ++j) {
    for (int h = 0; h < hosts; ++h) {
      const size_t r = static_cast<size_t>(h * locals + j);
      regrouped.narrow(0, at, split_sizes[r]).copy_(input.narrow(0, offsets[r], split_sizes[r]));
      at += split_sizes[r];
      block_sizes[static_cast<size_t>(j)] += split_sizes[r];
    }
  }
  // Step 1, shared memory: this host's partial sums of my block, in the accumulate dtype.
  const int l = local_->rank();
  auto partial = torch::empty({block_sizes[static_cast<size_t>(l)]},
                              input.options().dtype(accumulate_dtype(input.scalar_type())));
  local_->reduce_scatter_sum_v(regrouped, block_sizes, partial)->wait();
  // Step 2, Gloo across my rail: every host's partial of my piece, summed in host order.
  std::vector<int64_t> rail_sizes;
  for (int h = 0; h < hosts; ++h)
    rail_sizes.push_back(split_sizes[static_cast<size_t>(h * locals + l)]);
  if (output.scalar_type() == partial.scalar_type()) {
    rail_->reduce_scatter_sum_v(partial, rail_sizes, output)->wait();
    return;
  }
  auto total = torch::empty({output.numel()}, partial.options());
  rail_->reduce_scatter_sum_v(partial, rail_sizes, total)->wait();
  output.copy_(total);  // rounded once
}

void HierarchicalComm::all_gather_now(const torch::Tensor& input, const torch::Tensor& output) {
  const int64_t n = input.numel();
  // Step 1, Gloo: the inputs of my rail's ranks, [hosts, n]. Step 2, shared memory: every local
  // rank's rail result, [locals, hosts, n]; the output is rank-major, [hosts, locals, n].
  auto rail_out = torch::empty({hosts_ * n}, input.options());
  rail_->all_gather(input, rail_out)->wait();
  auto local_out = torch::empty({local_size_ * hosts_ * n}, input.options());
  local_->all_gather(rail_out, local_out)->wait();
  output.view({hosts_, local_size_, n})
      .copy_(local_out.view({local_size_, hosts_, n}).transpose(0, 1));
}

WorkPtr HierarchicalComm::reduce_scatter_sum(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum", "input");
  auto out = flat_view(output, "reduce_scatter_sum", "output");
  check_reduce_scatter(in, out, size());
  if (out.numel() == 0) return std::make_shared<CompletedWork>();
  return reduce_scatter_sum_v(in, std::vector<int64_t>(static_cast<size_t>(size()), out.numel()),
                              out);
}

WorkPtr HierarchicalComm::reduce_scatter_sum_v(torch::Tensor input,
                                               std::vector<int64_t> split_sizes,
                                               torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum_v", "input");
  auto out = flat_view(output, "reduce_scatter_sum_v", "output");
  check_reduce_scatter_v(in, split_sizes, out, size(), rank());
  return worker_->submit(
      [this, in, splits = std::move(split_sizes), out] { reduce_scatter_now(in, splits, out); });
}

WorkPtr HierarchicalComm::all_gather(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "all_gather", "input");
  auto out = flat_view(output, "all_gather", "output");
  check_all_gather(in, out, size());
  if (in.numel() == 0) return std::make_shared<CompletedWork>();
  // The input may be this rank's own slot of the output: the rail step reads it before
  // anything writes the output.
  return worker_->submit([this, in, out] { all_gather_now(in, out); });
}

WorkPtr HierarchicalComm::all_reduce_sum(torch::Tensor tensor) {
  auto flat = flat_view(tensor, "all_reduce_sum", "tensor");
  check_reducible(flat.scalar_type(), "all_reduce_sum");
  if (flat.numel() == 0) return std::make_shared<CompletedWork>();
  return worker_->submit([this, flat] {
    const int64_t n = flat.numel();
    const int64_t piece = (n + size() - 1) / size();
    auto padded = torch::zeros({piece * size()}, flat.options());
    padded.narrow(0, 0, n).copy_(flat);
    auto mine = torch::empty({piece}, flat.options());
    reduce_scatter_now(padded, std::vector<int64_t>(static_cast<size_t>(size()), piece), mine);
    all_gather_now(mine, padded);
    flat.copy_(padded.narrow(0, 0, n));
  });
}

// Through the worker too, so that they come after this rank's earlier collectives, as on the
// other transports (a barrier means "my collectives so far are done").
WorkPtr HierarchicalComm::broadcast(torch::Tensor tensor, int root) {
  auto flat = flat_view(tensor, "broadcast", "tensor");
  check_root(root, size(), "broadcast");
  if (flat.numel() == 0) return std::make_shared<CompletedWork>();
  return worker_->submit([this, flat, root] { world_->broadcast(flat, root)->wait(); });
}

void HierarchicalComm::barrier() {
  worker_->submit([this] { world_->barrier(); })->wait();
}

torch::Tensor HierarchicalComm::shared_tensor(int64_t numel, torch::ScalarType dtype,
                                              std::string* why_not) {
  (void)numel;
  (void)dtype;
  if (why_not != nullptr) {
    *why_not = detail::concat("the ranks are on ", hosts_,
                              " hosts: each host would need every other host's pieces");
  }
  return {};
}

}  // namespace zoff::dist
