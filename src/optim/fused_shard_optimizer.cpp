// The fused backend of ShardOptimizer: a SpanOptimizer over the whole shard and the state it owns.
#include <string>

#include "shard_optimizer_backends.h"
#include "zoff/optim/aligned_floats.h"
#include "zoff/optim/simd_dispatch.h"
#include "zoff/optim/span_optimizer.h"

namespace zoff::optim::detail {
namespace {

class FusedShardOptimizer final : public ShardOptimizer {
 public:
  FusedShardOptimizer(const OptimizerOptions& options, size_t numel, int threads)
      : numel_(numel), span_(options, threads) {
    for (const auto& spec : span_.states()) {
      state_.emplace_back(numel_);
      span_.fill(state_.back().data(), numel_, spec.initial);
      pointers_.push_back(state_.back().data());
    }
  }

  void step(float* params, const float* grads, double lr, CopyOut copy_out,
            uint16_t* out16) override {
    check_step_arguments(params, grads, lr, copy_out, out16, numel_);
    span_.begin_step(lr);
    try {
      span_.step_span(params, grads, pointers_.data(), numel_, copy_out, out16);
    } catch (...) {
      span_.abort_step();  // the step count stays where it was
      throw;
    }
    span_.end_step();
  }

  size_t numel() const override { return numel_; }
  int64_t step_count() const override { return span_.step_count(); }

  size_t state_bytes() const override {
    size_t bytes = 0;
    for (const auto& s : state_) bytes += s.bytes();
    return bytes;
  }

  std::map<std::string, float*> state_buffers() override {
    std::map<std::string, float*> buffers;
    for (size_t i = 0; i < state_.size(); ++i) buffers[span_.states()[i].name] = state_[i].data();
    return buffers;
  }

  void set_step_count(int64_t step) override { span_.set_step_count(step); }

  std::string name() const override {
    return span_.options().type + " (fused, " + active_simd_target() + ", " +
           std::to_string(span_.threads()) + " threads)";
  }

 private:
  size_t numel_;
  SpanOptimizer span_;
  std::vector<AlignedFloats> state_;  // each numel floats, in span_.states() order
  std::vector<float*> pointers_;
};

}  // namespace

std::unique_ptr<ShardOptimizer> make_fused_shard_optimizer(const OptimizerOptions& options,
                                                           size_t numel, int threads) {
  return std::make_unique<FusedShardOptimizer>(options, numel, threads);
}

}  // namespace zoff::optim::detail
