// SpanOptimizer: the fused kernels over caller-held spans, one step's coefficients fixed per step.
#include "zoff/optim/span_optimizer.h"

#include <algorithm>

#include "shard_optimizer_backends.h"
#include "simd_targets.h"
#include "zoff/core/error.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/simd_dispatch.h"

namespace zoff::optim {
namespace {

// Below this many elements per thread, waking another thread costs more than it saves
// (a wake-up is ~10 us; 64 Ki floats stream in about that time).
constexpr size_t kMinElementsPerThread = size_t{64} << 10;

// Validates the options before the pool starts its threads.
int checked_threads(const OptimizerOptions& options, int threads) {
  detail::validate_options(options);
  return threads;
}

uint16_t* part_of(uint16_t* out16, CopyOut copy_out, size_t begin) {
  return copy_out == CopyOut::kNone ? nullptr : out16 + begin;
}

}  // namespace

SpanOptimizer::SpanOptimizer(const OptimizerOptions& options, int threads)
    : options_(options), pool_(checked_threads(options, threads)) {
  if (options.type == "sgd") {
    kind_ = Kind::kSgd;
    if (options.momentum != 0.0) states_.push_back({"momentum_buffer", 0.0f});
  } else if (options.type == "adagrad") {
    kind_ = Kind::kAdagrad;
    states_.push_back({"sum", static_cast<float>(options.initial_accumulator_value)});
  } else {
    states_.push_back({"exp_avg", 0.0f});
    states_.push_back({"exp_avg_sq", 0.0f});
  }
}

void SpanOptimizer::begin_step(double lr) {
  ZOFF_CHECK(!in_step_, "optimizer: begin_step twice without end_step");
  detail::check_step_arguments(nullptr, nullptr, lr, CopyOut::kNone, nullptr, 0);
  detail::ensure_simd_env_applied();  // here, so a bad ZOFF_SIMD throws on the caller's thread
  lr_ = lr;
  in_step_ = true;
}

void SpanOptimizer::end_step() {
  ZOFF_CHECK(in_step_, "optimizer: end_step without begin_step");
  in_step_ = false;
  ++step_;
}

template <class Body>
void SpanOptimizer::run_split(size_t n, size_t first_aligned, const Body& body) {
  const auto bounds = split_on_cache_lines(n, pool_.size(), first_aligned, kMinElementsPerThread);
  pool_.run([&](int k) {
    const size_t begin = bounds[static_cast<size_t>(k)];
    const size_t end = bounds[static_cast<size_t>(k) + 1];
    if (end > begin) body(begin, end - begin);
  });
}

void SpanOptimizer::step_span(float* params, const float* grads, float* const* states, size_t n,
                              CopyOut copy_out, uint16_t* out16) {
  ZOFF_CHECK(in_step_, "optimizer: step_span outside begin_step/end_step");
  detail::check_step_arguments(params, grads, lr_, copy_out, out16, n);
  if (n == 0) return;
  const int64_t t = step_ + 1;
  const size_t aligned = first_cache_line_index(params);
  switch (kind_) {
    case Kind::kAdam: {
      const auto c = adam_coefficients(options_, lr_, t);
      run_split(n, aligned, [&](size_t b, size_t k) {
        fused_adam(c, params + b, grads + b, states[0] + b, states[1] + b, k, copy_out,
                   part_of(out16, copy_out, b));
      });
      break;
    }
    case Kind::kSgd: {
      const auto c = sgd_coefficients(options_, lr_, t);
      float* buf = states_.empty() ? nullptr : states[0];
      run_split(n, aligned, [&](size_t b, size_t k) {
        fused_sgd(c, params + b, grads + b, buf == nullptr ? nullptr : buf + b, k, copy_out,
                  part_of(out16, copy_out, b));
      });
      break;
    }
    case Kind::kAdagrad: {
      const auto c = adagrad_coefficients(options_, lr_, t);
      run_split(n, aligned, [&](size_t b, size_t k) {
        fused_adagrad(c, params + b, grads + b, states[0] + b, k, copy_out,
                      part_of(out16, copy_out, b));
      });
      break;
    }
  }
}

void SpanOptimizer::set_step_count(int64_t step) {
  ZOFF_CHECK_ARG(step >= 0 && step <= detail::kMaxStepCount, "optimizer: step count = ", step,
                 ": must be in [0, 2^53]");
  step_ = step;
}

void SpanOptimizer::fill(float* data, size_t n, float value) {
  run_split(n, 0, [&](size_t b, size_t k) { std::fill(data + b, data + b + k, value); });
}

}  // namespace zoff::optim
