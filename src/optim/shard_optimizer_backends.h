// Internal: the two ShardOptimizer backends and the checks they share (not a public header).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "zoff/optim/shard_optimizer.h"

namespace zoff::optim::detail {

// Throws zoff::UsageError naming the first bad field of `options` (see shard_optimizer.cpp).
void validate_options(const OptimizerOptions& options);

// Throws zoff::UsageError for a bad step() call: null spans, lr < 0 or not finite, a
// copy-out without an output buffer.
void check_step_arguments(const float* params, const float* grads, double lr, CopyOut copy_out,
                          const uint16_t* out16, size_t numel);

// Throws zoff::UsageError when a scattered copy-out does not have `numel` elements.
void check_scattered_out(const CopyOutPieces& out, size_t numel);

// The step counter's hard limit: LibTorch's pow(beta, t) is fine far beyond it, and a
// negative or absurd count from a damaged checkpoint is refused.
constexpr int64_t kMaxStepCount = int64_t{1} << 53;

std::unique_ptr<ShardOptimizer> make_fused_shard_optimizer(const OptimizerOptions& options,
                                                           size_t numel, int threads,
                                                           size_t segment_numel,
                                                           const StateMemory& memory);
std::unique_ptr<ShardOptimizer> make_torch_shard_optimizer(const OptimizerOptions& options,
                                                           size_t numel, int threads);

}  // namespace zoff::optim::detail
