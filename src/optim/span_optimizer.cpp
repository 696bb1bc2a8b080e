// SpanOptimizer: the fused kernels over caller-held spans, one step's coefficients fixed per step.
#include "zoff/optim/span_optimizer.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "shard_optimizer_backends.h"
#include "simd_targets.h"
#include "zoff/core/error.h"
#include "zoff/optim/compressed_adam.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/simd_dispatch.h"
#include "zoff/optim/split_master.h"

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

// The state pointers of fp32 StateSpans as the float kernels take them (at most two states).
struct FloatStates {
  float* p[2] = {nullptr, nullptr};
};

FloatStates floats_of(const StateSpan* states, size_t count) {
  FloatStates f;
  for (size_t i = 0; i < count && i < 2; ++i) f.p[i] = static_cast<float*>(states[i].data);
  return f;
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

namespace detail {

// Where the copy-out of a span's element i goes: out16 + i (contiguous), or element
// begin + i of scattered pieces. The kernels take one contiguous destination, so a part of
// a span is handed to them run by run, each run inside one piece.
class CopyOutDest {
 public:
  CopyOutDest(CopyOut kind, uint16_t* out16) : kind_(kind), out16_(out16) {}
  CopyOutDest(CopyOut kind, const CopyOutPieces* pieces, size_t begin)
      : kind_(kind), pieces_(pieces), begin_(begin) {}

  CopyOut kind() const { return kind_; }

  // fn(r, rk, dst) over the runs of [b, b + k) for elementwise kernels (dst null without a
  // copy-out).
  template <class Fn>
  void runs(size_t b, size_t k, const Fn& fn) const {
    if (kind_ == CopyOut::kNone) return fn(b, k, nullptr);
    if (pieces_ == nullptr) return fn(b, k, out16_ + b);
    pieces_->for_each_run(begin_ + b, k,
                          [&](size_t pb, size_t pk, uint16_t* dst) { fn(pb - begin_, pk, dst); });
  }

  // The same for the int8 kernel, whose runs are whole state blocks (b is on a block): a
  // run ends on a block boundary or at b + k, and a block that crosses from one piece into
  // the next writes into a bounce buffer that is then scattered (at most one block per
  // piece boundary, so nearly every element is written in place).
  template <class Fn>
  void block_runs(size_t b, size_t k, const Fn& fn) const {
    if (kind_ == CopyOut::kNone || pieces_ == nullptr) return runs(b, k, fn);
    const size_t end = b + k;
    while (b < end) {
      const CopyOutPiece& p = pieces_->piece_of(begin_ + b);
      uint16_t* dst = p.dst + (begin_ + b - p.begin);
      const size_t piece_end = p.begin + p.n - begin_;  // in span elements, > b
      if (piece_end >= end) return fn(b, end - b, dst);
      const size_t whole = (piece_end - b) / kStateBlock * kStateBlock;
      if (whole > 0) {
        fn(b, whole, dst);
        b += whole;
        continue;
      }
      const size_t n = std::min(kStateBlock, end - b);
      uint16_t bounce[kStateBlock];
      fn(b, n, bounce);
      pieces_->scatter(begin_ + b, n, bounce);
      b += n;
    }
  }

 private:
  CopyOut kind_;
  uint16_t* out16_ = nullptr;
  const CopyOutPieces* pieces_ = nullptr;
  size_t begin_ = 0;
};

}  // namespace detail

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
  StateSpan spans[2];
  for (size_t i = 0; i < states_.size() && i < 2; ++i) spans[i].data = states[i];
  step_states(params, grads, spans, n, detail::CopyOutDest(copy_out, out16));
}

void SpanOptimizer::check_states(const StateSpan* states, size_t n, SpanPlace place) const {
  ZOFF_CHECK(in_step_, "optimizer: step_span outside begin_step/end_step");
  check_span_place(state_dtype_, place, n);
  for (size_t i = 0; i < states_.size() && n > 0; ++i) {
    ZOFF_CHECK_ARG(states[i].data != nullptr, "optimizer step: state ", states_[i].name,
                   " is null for ", n, " elements");
    ZOFF_CHECK_ARG(state_dtype_ != StateDtype::kInt8 || states[i].scales != nullptr,
                   "optimizer step: int8 state ", states_[i].name, " has no scales");
  }
}

void SpanOptimizer::step_span(float* params, const float* grads, const StateSpan* states, size_t n,
                              SpanPlace place, CopyOut copy_out, uint16_t* out16) {
  detail::check_step_arguments(params, grads, lr_, copy_out, out16, n);
  check_states(states, n, place);
  if (n == 0) return;
  step_states(params, grads, states, n, detail::CopyOutDest(copy_out, out16));
}

void SpanOptimizer::step_span(float* params, const float* grads, const StateSpan* states, size_t n,
                              SpanPlace place, CopyOut copy_out, const CopyOutPieces& pieces,
                              size_t out_begin) {
  detail::check_step_arguments(params, grads, lr_, CopyOut::kNone, nullptr, n);
  check_states(states, n, place);
  ZOFF_CHECK_ARG(out_begin <= pieces.numel() && n <= pieces.numel() - out_begin,
                 "optimizer step: a span of ", n, " elements from copy-out element ", out_begin,
                 " runs past the copy-out's ", pieces.numel());
  if (n == 0) return;
  step_states(params, grads, states, n, detail::CopyOutDest(copy_out, &pieces, out_begin));
}

// Every optimizer and state dtype: each thread's part of the span (int8: whole blocks) cut
// into runs inside the copy-out's pieces, each run handed to range_kernel's kernel.
void SpanOptimizer::step_states(float* params, const float* grads, const StateSpan* states,
                                size_t n, const detail::CopyOutDest& out) {
  if (n == 0) return;
  const RangeKernel kernel = range_kernel(states, out.kind());
  const auto run = [&](size_t r, size_t rk, uint16_t* dst) {
    kernel(params + r, grads + r, r, rk, dst);
  };
  if (state_dtype_ == StateDtype::kInt8) {
    run_split_blocks(n, [&](size_t b, size_t k) { out.block_runs(b, k, run); });
  } else {
    run_split(n, first_cache_line_index(params), [&](size_t b, size_t k) { out.runs(b, k, run); });
  }
}

void SpanOptimizer::check_split(const uint16_t* ext, const float* grads, const StateSpan* states,
                                size_t n, SpanPlace place) const {
  ZOFF_CHECK_ARG(n == 0 || (ext != nullptr && grads != nullptr),
                 "optimizer split step: ", ext == nullptr ? "the extensions" : "the gradients",
                 " are null for ", n, " elements");
  detail::check_step_arguments(nullptr, nullptr, lr_, CopyOut::kNone, nullptr, 0);
  check_states(states, n, place);
}

size_t SpanOptimizer::step_split_span(uint16_t* copy, uint16_t* ext, const float* grads,
                                      const StateSpan* states, size_t n, SpanPlace place) {
  check_split(ext, grads, states, n, place);
  ZOFF_CHECK_ARG(n == 0 || copy != nullptr, "optimizer split step: the copy is null for ", n,
                 " elements");
  return step_split(ext, grads, states, n, detail::CopyOutDest(CopyOut::kBf16, copy));
}

size_t SpanOptimizer::step_split_span(const CopyOutPieces& copy_pieces, size_t out_begin,
                                      uint16_t* ext, const float* grads, const StateSpan* states,
                                      size_t n, SpanPlace place) {
  check_split(ext, grads, states, n, place);
  ZOFF_CHECK_ARG(out_begin <= copy_pieces.numel() && n <= copy_pieces.numel() - out_begin,
                 "optimizer split step: a span of ", n, " elements from copy element ", out_begin,
                 " runs past the copy's ", copy_pieces.numel());
  return step_split(ext, grads, states, n,
                    detail::CopyOutDest(CopyOut::kBf16, &copy_pieces, out_begin));
}

// bf16 / int8 states: Adam and AdamW only (validate_options refuses the others).
SpanOptimizer::RangeKernel SpanOptimizer::range_kernel(const StateSpan* states,
                                                       CopyOut copy_out) const {
  const int64_t t = step_ + 1;
  if (state_dtype_ == StateDtype::kBf16) {
    const auto c = adam_coefficients(options_, lr_, t);
    auto* m = static_cast<uint16_t*>(states[0].data);
    auto* v = static_cast<uint16_t*>(states[1].data);
    return [c, m, v, copy_out](float* p, const float* g, size_t at, size_t n, uint16_t* dst) {
      fused_adam_bf16_states(c, p, g, m + at, v + at, n, copy_out, dst);
    };
  }
  if (state_dtype_ == StateDtype::kInt8) {
    const auto c = adam_coefficients(options_, lr_, t);
    return [c, m = states[0], v = states[1], copy_out](float* p, const float* g, size_t at,
                                                       size_t n, uint16_t* dst) {
      const Int8AdamStates s{static_cast<int8_t*>(m.data) + at, m.scales + at / kStateBlock,
                             static_cast<uint8_t*>(v.data) + at, v.scales + at / kStateBlock};
      fused_adam_int8_states(c, p, g, s, n, copy_out, dst);
    };
  }
  const FloatStates f = floats_of(states, states_.size());
  switch (kind_) {
    case Kind::kSgd:
      return [c = sgd_coefficients(options_, lr_, t), buf = f.p[0], copy_out](
                 float* p, const float* g, size_t at, size_t n, uint16_t* dst) {
        fused_sgd(c, p, g, buf == nullptr ? nullptr : buf + at, n, copy_out, dst);
      };
    case Kind::kAdagrad:
      return [c = adagrad_coefficients(options_, lr_, t), sum = f.p[0], copy_out](
                 float* p, const float* g, size_t at, size_t n, uint16_t* dst) {
        fused_adagrad(c, p, g, sum + at, n, copy_out, dst);
      };
    case Kind::kAdam:
      break;
  }
  return [c = adam_coefficients(options_, lr_, t), f, copy_out](float* p, const float* g, size_t at,
                                                                size_t n, uint16_t* dst) {
    fused_adam(c, p, g, f.p[0] + at, f.p[1] + at, n, copy_out, dst);
  };
}

// The split step: n elements, each thread on its own block-aligned range, which it joins,
// updates and splits again kSplitChunk elements at a time.
size_t SpanOptimizer::step_split(uint16_t* ext, const float* grads, const StateSpan* states,
                                 size_t n, const detail::CopyOutDest& copy) {
  if (n == 0) return 0;
  // Elements joined, updated and split per pass on one thread: the joined masters (64 KiB
  // of fp32) stay in L2 between the three; a whole number of int8 blocks.
  constexpr size_t kSplitChunk = 8 * kStateBlock;
  const RangeKernel kernel = range_kernel(states, CopyOut::kNone);
  std::atomic<size_t> settled{0};
  run_split_blocks(n, [&](size_t b, size_t k) {
    const std::unique_ptr<float[]> joined(new float[std::min(k, kSplitChunk)]);
    float* master = joined.get();
    size_t mine = 0;
    for (size_t c = b; c < b + k; c += kSplitChunk) {
      const size_t m = std::min(kSplitChunk, b + k - c);
      copy.runs(c, m, [&](size_t r, size_t rk, uint16_t* dst) {
        split_master_decode(dst, ext + r, rk, master + (r - c));
      });
      kernel(master, grads + c, c, m, nullptr);
      copy.runs(c, m, [&](size_t r, size_t rk, uint16_t* dst) {
        mine += split_master_encode_from(master + (r - c), rk, dst, ext + r);
      });
    }
    settled += mine;
  });
  return settled.load();
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
