// Argument rules shared by every Comm backend, so a call that is wrong at N = 2 fails at N = 1.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "rank_order_sum.h"

namespace zoff::dist {

// Checks `tensor` is defined, on the CPU and contiguous; returns it as a 1-D view.
torch::Tensor flat_view(const torch::Tensor& tensor, const char* op, const char* name);

// Gloo sums fp32, fp64 and 8/32/64-bit integers; bf16/fp16 throw zoff::Error pointing at
// the fp32 route.
void check_reducible(torch::ScalarType dtype, const char* op);

// input: size * n elements; output: n elements of the input's dtype or its accumulate dtype.
void check_reduce_scatter(const torch::Tensor& input, const torch::Tensor& output, int size);

// Uneven form: input is split_sizes[0] + ... + split_sizes[size - 1] elements, output is
// split_sizes[rank] elements; the dtype rules are those of check_reduce_scatter.
void check_reduce_scatter_v(const torch::Tensor& input, const std::vector<int64_t>& split_sizes,
                            const torch::Tensor& output, int size, int rank);

// output: size * n elements of the input's dtype.
void check_all_gather(const torch::Tensor& input, const torch::Tensor& output, int size);

void check_root(int root, int size, const char* op);

}  // namespace zoff::dist
