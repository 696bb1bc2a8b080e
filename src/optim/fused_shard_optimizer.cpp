// The fused backend of ShardOptimizer: SIMD kernels over the shard, split among a thread pool.
#include <algorithm>
#include <string>

#include "shard_optimizer_backends.h"
#include "simd_targets.h"
#include "zoff/core/error.h"
#include "zoff/optim/aligned_floats.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/simd_dispatch.h"
#include "zoff/optim/thread_pool.h"

namespace zoff::optim::detail {
namespace {

// Below this many elements per thread, waking another thread costs more than it saves
// (a wake-up is ~10 us; 64 Ki floats stream in about that time).
constexpr size_t kMinElementsPerThread = size_t{64} << 10;

enum class Kind { kAdam, kSgd, kAdagrad };

class FusedShardOptimizer final : public ShardOptimizer {
 public:
  FusedShardOptimizer(const OptimizerOptions& options, size_t numel, int threads)
      : options_(options), numel_(numel), pool_(threads) {
    if (options.type == "sgd") {
      kind_ = Kind::kSgd;
      if (options.momentum != 0.0) add_state("momentum_buffer", 0.0f);
    } else if (options.type == "adagrad") {
      kind_ = Kind::kAdagrad;
      add_state("sum", static_cast<float>(options.initial_accumulator_value));
    } else {
      kind_ = Kind::kAdam;
      add_state("exp_avg", 0.0f);
      add_state("exp_avg_sq", 0.0f);
    }
  }

  void step(float* params, const float* grads, double lr, CopyOut copy_out,
            uint16_t* out16) override {
    check_step_arguments(params, grads, lr, copy_out, out16, numel_);
    ensure_simd_env_applied();  // here, so a bad ZOFF_SIMD throws on the caller's thread
    const int64_t t = step_ + 1;
    const auto bounds = split_on_cache_lines(numel_, pool_.size(), first_cache_line_index(params),
                                             kMinElementsPerThread);
    switch (kind_) {
      case Kind::kAdam: {
        const auto c = adam_coefficients(options_, lr, t);
        run_parts(bounds, [&](size_t b, size_t n) {
          fused_adam(c, params + b, grads + b, state_[0].data() + b, state_[1].data() + b, n,
                     copy_out, copy_out == CopyOut::kNone ? nullptr : out16 + b);
        });
        break;
      }
      case Kind::kSgd: {
        const auto c = sgd_coefficients(options_, lr, t);
        float* buf = state_.empty() ? nullptr : state_[0].data();
        run_parts(bounds, [&](size_t b, size_t n) {
          fused_sgd(c, params + b, grads + b, buf == nullptr ? nullptr : buf + b, n, copy_out,
                    copy_out == CopyOut::kNone ? nullptr : out16 + b);
        });
        break;
      }
      case Kind::kAdagrad: {
        const auto c = adagrad_coefficients(options_, lr, t);
        run_parts(bounds, [&](size_t b, size_t n) {
          fused_adagrad(c, params + b, grads + b, state_[0].data() + b, n, copy_out,
                        copy_out == CopyOut::kNone ? nullptr : out16 + b);
        });
        break;
      }
    }
    step_ = t;
  }

  size_t numel() const override { return numel_; }
  int64_t step_count() const override { return step_; }

  size_t state_bytes() const override {
    size_t bytes = 0;
    for (const auto& s : state_) bytes += s.bytes();
    return bytes;
  }

  std::map<std::string, float*> state_buffers() override {
    std::map<std::string, float*> buffers;
    for (size_t i = 0; i < state_.size(); ++i) buffers[state_names_[i]] = state_[i].data();
    return buffers;
  }

  void set_step_count(int64_t step) override {
    ZOFF_CHECK_ARG(step >= 0 && step <= kMaxStepCount, "optimizer: step count = ", step,
                   ": must be in [0, 2^53]");
    step_ = step;
  }

  std::string name() const override {
    return options_.type + " (fused, " + active_simd_target() + ", " +
           std::to_string(pool_.size()) + " threads)";
  }

 private:
  // A state buffer of numel floats, filled with `value` by the pool's threads (first touch).
  void add_state(const std::string& name, float value) {
    state_names_.push_back(name);
    state_.emplace_back(numel_);
    float* data = state_.back().data();
    const auto bounds = split_on_cache_lines(numel_, pool_.size(), 0, kMinElementsPerThread);
    run_parts(bounds, [&](size_t b, size_t n) { std::fill(data + b, data + b + n, value); });
  }

  template <class Body>
  void run_parts(const std::vector<size_t>& bounds, const Body& body) {
    pool_.run([&](int k) {
      const size_t begin = bounds[static_cast<size_t>(k)];
      const size_t end = bounds[static_cast<size_t>(k) + 1];
      if (end > begin) body(begin, end - begin);
    });
  }

  OptimizerOptions options_;
  size_t numel_;
  Kind kind_ = Kind::kAdam;
  ThreadPool pool_;
  std::vector<std::string> state_names_;
  std::vector<AlignedFloats> state_;  // each numel floats, in state_names_ order
  int64_t step_ = 0;
};

}  // namespace

std::unique_ptr<ShardOptimizer> make_fused_shard_optimizer(const OptimizerOptions& options,
                                                           size_t numel, int threads) {
  return std::make_unique<FusedShardOptimizer>(options, numel, threads);
}

}  // namespace zoff::optim::detail
