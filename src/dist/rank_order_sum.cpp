// The rank-order sum of a reduce-scatter: a blocked single pass for fp32 and bf16 rows, LibTorch
// for the rest.
#include "rank_order_sum.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace zoff::dist {
namespace {

// Elements per block: the fp32 output block (16 KB) stays in L1 while every row adds into it.
constexpr int64_t kBlock = 4096;

inline float widen(float x) { return x; }

// bf16 is the top half of an fp32: widening is exact.
inline float widen(c10::BFloat16 x) {
  const uint32_t bits = static_cast<uint32_t>(x.x) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Blocks per task of the intra-op threads (parallel sums only): below 64 blocks (256K
// elements, ~1 MB of fp32 output) a sum stays on the calling thread. Each element is still
// summed in rank order, so the result does not depend on the thread count. (A GPU run at
// world size 1 widens its whole bf16 gradient here once per step: 2.5G elements at gpt
// 2.7b, whose offloaded backward took 3.3 s on an H200 machine.)
constexpr int64_t kBlocksPerTask = 64;

template <typename In>
void sum_rows_fp32(const std::vector<torch::Tensor>& rows, float* out, int64_t n, bool parallel) {
  std::vector<const In*> in;
  for (const auto& r : rows) in.push_back(r.data_ptr<In>());
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto sum_blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t lo = b0 * kBlock; lo < std::min(n, b1 * kBlock); lo += kBlock) {
      const int64_t hi = std::min(n, lo + kBlock);
      const In* first = in[0];
      for (int64_t i = lo; i < hi; ++i) out[i] = widen(first[i]);
      for (size_t r = 1; r < in.size(); ++r) {
        const In* row = in[r];
        for (int64_t i = lo; i < hi; ++i) out[i] += widen(row[i]);
      }
    }
  };
  if (parallel) {
    at::parallel_for(0, blocks, kBlocksPerTask, sum_blocks);
  } else {
    sum_blocks(0, blocks);
  }
}

// LibTorch's route: accumulate straight into the output when it already has the accumulate
// dtype; else in a temporary (n elements) rounded once into the 16-bit output at the end.
void sum_rows_with_torch(const std::vector<torch::Tensor>& rows, torch::Tensor& output) {
  const auto acc_dtype = accumulate_dtype(rows.at(0).scalar_type());
  torch::Tensor acc = output.scalar_type() == acc_dtype
                          ? output
                          : torch::empty({output.numel()}, output.options().dtype(acc_dtype));
  acc.copy_(rows[0]);
  for (size_t r = 1; r < rows.size(); ++r) acc.add_(rows[r]);
  if (!acc.is_same(output)) output.copy_(acc);
}

}  // namespace

torch::ScalarType accumulate_dtype(torch::ScalarType input) {
  if (input == torch::kDouble) return torch::kDouble;
  if (c10::isFloatingType(input)) return torch::kFloat;
  return input;
}

void sum_in_rank_order(const torch::Tensor& chunks, int size, torch::Tensor output, bool parallel) {
  auto rows = chunks.view({size, output.numel()});
  sum_rows_in_order(std::vector<torch::Tensor>(rows.unbind(0)), std::move(output), parallel);
}

void sum_rows_in_order(const std::vector<torch::Tensor>& rows, torch::Tensor output,
                       bool parallel) {
  const auto dtype = rows.at(0).scalar_type();
  const bool fast =
      output.scalar_type() == torch::kFloat && output.is_contiguous() &&
      (dtype == torch::kFloat || dtype == torch::kBFloat16) &&
      std::all_of(rows.begin(), rows.end(), [&](const torch::Tensor& r) {
        return r.scalar_type() == dtype && r.is_contiguous() && r.numel() == output.numel();
      });
  if (!fast) return sum_rows_with_torch(rows, output);
  float* out = output.data_ptr<float>();
  if (dtype == torch::kFloat) {
    sum_rows_fp32<float>(rows, out, output.numel(), parallel);
  } else {
    sum_rows_fp32<c10::BFloat16>(rows, out, output.numel(), parallel);
  }
}

}  // namespace zoff::dist
