// The deterministic local sum of a reduce-scatter: ranks' rows added left to right.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zoff::dist {

// The dtype reduce_scatter_sum accumulates in: fp64 for fp64, fp32 for other floating types
// (bf16/fp16 included), the input's own type for integers.
torch::ScalarType accumulate_dtype(torch::ScalarType input);

// output <- chunks[0] + chunks[1] + ... + chunks[size - 1], chunks being `size` rows of
// output.numel() elements, added left to right in the accumulate dtype. The fixed order makes
// the result the same bit for bit on every run. `parallel`: split the fp32/bf16 pass over
// LibTorch's intra-op threads (the same bits); for a caller whose sum is not overlapped with
// compute that has those threads (SingleComm, which a GPU run at world size 1 calls).
void sum_in_rank_order(const torch::Tensor& chunks, int size, torch::Tensor output,
                       bool parallel = false);

// The same sum over rows that need not lie in one tensor (the slots of a shared segment):
// output <- rows[0] + rows[1] + ..., each row output.numel() elements of one dtype.
//
// The common case, fp32 or bf16 rows into an fp32 output, is one pass over cache-sized blocks:
// each element widened exactly and added in rank order, so the bits are those of
// output.copy_(rows[0]); output.add_(rows[1]); ... which LibTorch computes in three passes with
// an fp32 temporary of every bf16 row. Other dtypes take that LibTorch route.
void sum_rows_in_order(const std::vector<torch::Tensor>& rows, torch::Tensor output,
                       bool parallel = false);

}  // namespace zoff::dist
