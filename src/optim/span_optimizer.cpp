// SpanOptimizer: the fused kernels over caller-held spans, one step's coefficients fixed per step.
#include "zoff/optim/span_optimizer.h"

#include <algorithm>
#include <vector>

#include "shard_optimizer_backends.h"
#include "simd_targets.h"
#include "zoff/core/error.h"
#include "zoff/optim/compressed_adam.h"
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

// Throws zoff::UsageError when [begin, begin + n) is not inside the shard, or (int8) does not
// start on a block or ends inside one before the shard's end.
void check_span_place(StateDtype dtype, SpanPlace place, size_t n) {
  const size_t end = place.begin + n;
  ZOFF_CHECK_ARG(end >= place.begin && end <= place.shard_numel, "optimizer step: span [",
                 place.begin, ", ", end, ") lies outside its shard of ", place.shard_numel,
                 " elements");
  if (dtype != StateDtype::kInt8) return;
  ZOFF_CHECK_ARG(
      place.begin % kStateBlock == 0 && (end % kStateBlock == 0 || end == place.shard_numel),
      "optimizer step: span [", place.begin, ", ", end, ") of a ", place.shard_numel,
      "-element shard does not match the int8 state blocks of ", kStateBlock,
      " elements: it must start on a block and end on one or at the shard's end");
}

}  // namespace

SpanOptimizer::SpanOptimizer(const OptimizerOptions& options, int threads)
    : options_(options),
      state_dtype_(parse_state_dtype(options.state_dtype)),
      pool_(checked_threads(options, threads)) {
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
void SpanOptimizer::run_split_blocks(size_t n, const Body& body) {
  const auto bounds =
      split_on_cache_lines(state_blocks(n), pool_.size(), 0, kMinElementsPerThread / kStateBlock);
  pool_.run([&](int k) {
    const size_t begin = std::min(n, bounds[static_cast<size_t>(k)] * kStateBlock);
    const size_t end = std::min(n, bounds[static_cast<size_t>(k) + 1] * kStateBlock);
    if (end > begin) body(begin, end - begin);
  });
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
  ZOFF_CHECK_ARG(state_dtype_ == StateDtype::kFp32, "optimizer step: state_dtype = '",
                 options_.state_dtype, "' states are not float buffers: pass StateSpans");
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

void SpanOptimizer::step_span(float* params, const float* grads, const StateSpan* states, size_t n,
                              SpanPlace place, CopyOut copy_out, uint16_t* out16) {
  ZOFF_CHECK(in_step_, "optimizer: step_span outside begin_step/end_step");
  detail::check_step_arguments(params, grads, lr_, copy_out, out16, n);
  check_span_place(state_dtype_, place, n);
  if (n == 0) return;
  for (size_t i = 0; i < states_.size(); ++i) {
    ZOFF_CHECK_ARG(states[i].data != nullptr, "optimizer step: state ", states_[i].name,
                   " is null for ", n, " elements");
    ZOFF_CHECK_ARG(state_dtype_ != StateDtype::kInt8 || states[i].scales != nullptr,
                   "optimizer step: int8 state ", states_[i].name, " has no scales");
  }
  if (state_dtype_ == StateDtype::kFp32) {
    std::vector<float*> floats;
    for (size_t i = 0; i < states_.size(); ++i)
      floats.push_back(static_cast<float*>(states[i].data));
    return step_span(params, grads, floats.data(), n, copy_out, out16);
  }
  step_compressed(params, grads, states, n, copy_out, out16);
}

// bf16 / int8 states: Adam and AdamW only (validate_options refuses the others).
void SpanOptimizer::step_compressed(float* params, const float* grads, const StateSpan* states,
                                    size_t n, CopyOut copy_out, uint16_t* out16) {
  const auto c = adam_coefficients(options_, lr_, step_ + 1);
  if (state_dtype_ == StateDtype::kBf16) {
    auto* m = static_cast<uint16_t*>(states[0].data);
    auto* v = static_cast<uint16_t*>(states[1].data);
    run_split(n, first_cache_line_index(params), [&](size_t b, size_t k) {
      fused_adam_bf16_states(c, params + b, grads + b, m + b, v + b, k, copy_out,
                             part_of(out16, copy_out, b));
    });
    return;
  }
  run_split_blocks(n, [&](size_t b, size_t k) {
    const Int8AdamStates s{
        static_cast<int8_t*>(states[0].data) + b, states[0].scales + b / kStateBlock,
        static_cast<uint8_t*>(states[1].data) + b, states[1].scales + b / kStateBlock};
    fused_adam_int8_states(c, params + b, grads + b, s, k, copy_out, part_of(out16, copy_out, b));
  });
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
