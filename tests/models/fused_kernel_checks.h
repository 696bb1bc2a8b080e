// Test helpers shared by the fused bf16 kernels' tests: forward + backward through an op,
// the fraction of elements that differ, thread-count independence, and a guard that restores the
// best SIMD level.
#pragma once

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "zoff/optim/simd_dispatch.h"

namespace zoff::models::kernel_checks {

struct Result {
  torch::Tensor y, dx;  // the op's output and its input's gradient
};

// y and x's gradient of (y * dy).sum() through `op`, on a fresh leaf copy of x.
template <class Op>
Result forward_backward(const Op& op, const torch::Tensor& x, const torch::Tensor& dy) {
  auto leaf = x.detach().clone().requires_grad_();
  auto y = op(leaf);
  y.backward(dy);
  return {y.detach(), leaf.grad()};
}

// Fraction of the elements whose values differ at all.
inline double differing_fraction(const torch::Tensor& a, const torch::Tensor& b) {
  return a.ne(b).to(torch::kFloat64).mean().item<double>();
}

// Runs forward_backward(op, x, dy) on one intra-op thread and on two, expects the same bits
// from both, and returns the results.
template <class Op>
Result expect_same_on_one_and_two_threads(const Op& op, const torch::Tensor& x,
                                          const torch::Tensor& dy) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = forward_backward(op, x, dy);
  at::set_num_threads(2);
  const auto two = forward_backward(op, x, dy);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(one.y, two.y));
  EXPECT_TRUE(torch::equal(one.dx, two.dx));
  return one;
}

// Puts the best SIMD level back however the test ends.
struct SimdLevelGuard {
  ~SimdLevelGuard() { optim::force_simd_level(optim::SimdLevel::kBest); }
};

}  // namespace zoff::models::kernel_checks
