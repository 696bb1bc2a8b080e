// The fp16 overflow vote and the global norm's rank-ordered sum of squares.
#include "zoff/engine/grad_stats.h"

#include "zoff/core/error.h"

namespace zoff::engine {

bool any_rank_overflowed(dist::Comm& comm, const torch::Tensor& grads) {
  auto flag = torch::isfinite(grads).all().logical_not().to(torch::kFloat64).reshape({1});
  if (comm.size() > 1) comm.all_reduce_sum(flag)->wait();
  return flag.item<double>() > 0.0;
}

double sum_in_rank_order(dist::Comm& comm, double local) {
  if (comm.size() == 1) return local;
  auto mine = torch::tensor({local}, torch::kFloat64);
  auto all = torch::empty({comm.size()}, torch::kFloat64);
  comm.all_gather(mine, all)->wait();
  const double* each = all.data_ptr<double>();
  double total = 0;
  for (int64_t r = 0; r < all.numel(); ++r) total += each[r];
  return total;
}

float* gradient_span(const torch::Tensor& grads) {
  ZOFF_CHECK(grads.scalar_type() == torch::kFloat32 && grads.is_contiguous() && grads.is_cpu(),
             "the reduced gradient must be a contiguous fp32 tensor in host memory, not ",
             grads.scalar_type(), " on ", grads.device());
  return grads.data_ptr<float>();
}

}  // namespace zoff::engine
