// The fused optimizer update over spans the caller holds: what a tier streams through, sub-group by
// sub-group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zoff/optim/copy_out_pieces.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/state_dtype.h"
#include "zoff/optim/thread_pool.h"

namespace zoff::optim {

namespace detail {
class CopyOutDest;  // where a span's copy-out goes (span_optimizer.cpp)
}

// One state buffer the update needs per parameter (Adam's exp_avg, ...) and the value it
// starts with.
struct StateSpec {
  std::string name;
  float initial = 0.0f;
};

// One state of a span as stored (see StoredState): `data` points at the span's first
// element (n floats, n bf16 values or n int8 codes), `scales` (int8 only) at the scale of
// the span's first block.
struct StateSpan {
  void* data = nullptr;
  float* scales = nullptr;
};

// Where a span lies in its shard, in elements. Int8 blocks are counted from the shard's
// element 0, so with int8 states a span starts on a block boundary (begin a multiple of
// kStateBlock) and ends on one or at the shard's end; cut that way, a streamed step equals
// the in-memory one bit for bit, as with fp32 states.
struct SpanPlace {
  size_t begin = 0;
  size_t shard_numel = 0;
};

// The fused kernels of make_shard_optimizer's kFused backend, without owning any state: the
// caller keeps params, grads and the states wherever it likes (host memory, buffers streamed
// from disk) and hands them over span by span. One optimizer step is
//   begin_step(lr); step_span(...) for every span, in any order; end_step();
// so the step count t, and with it Adam's bias corrections, advances once per optimizer
// step however many spans it is cut into. Each span is split among `threads` threads.
// The result of a span does not depend on how the shard is cut (the kernels are
// elementwise), so a streamed step equals the in-memory one bit for bit.
class SpanOptimizer {
 public:
  // Throws zoff::UsageError naming a bad hyper-parameter or thread count.
  SpanOptimizer(const OptimizerOptions& options, int threads);

  // The states step_span() takes, in its order (e.g. exp_avg, exp_avg_sq).
  const std::vector<StateSpec>& states() const { return states_; }
  const OptimizerOptions& options() const { return options_; }
  StateDtype state_dtype() const { return state_dtype_; }
  int threads() const { return pool_.size(); }

  // Fixes this step's coefficients: lr (the schedule's value), t = step_count() + 1.
  void begin_step(double lr);
  // Updates n elements: params in place, states[i] (states().size() pointers of n floats),
  // and when copy_out != kNone writes the rounded params to out16 (n elements).
  // fp32 states only: with bf16 or int8 states it throws zoff::UsageError.
  void step_span(float* params, const float* grads, float* const* states, size_t n,
                 CopyOut copy_out, uint16_t* out16);
  // The same for states in any state dtype, stored as `states` (states().size() of them)
  // describe. Throws zoff::UsageError naming the span when `place` does not fit the shard
  // or the int8 block layout, or when a state pointer is null.
  void step_span(float* params, const float* grads, const StateSpan* states, size_t n,
                 SpanPlace place, CopyOut copy_out, uint16_t* out16);
  // The same with the 16-bit copy scattered: element i of the span goes where element
  // out_begin + i of `out` goes. Throws zoff::UsageError when the span runs past `out`.
  void step_span(float* params, const float* grads, const StateSpan* states, size_t n,
                 SpanPlace place, CopyOut copy_out, const CopyOutPieces& out, size_t out_begin);
  // The split master (split_master.h) in place of fp32 masters: each element's master is
  // joined from its bf16 copy and its 16-bit extension `ext` (n elements), stepped as
  // step_span() steps it, and split back into both; the copy is then the new master's
  // rounding to nearest even (what CopyOut::kBf16 writes) and odd ties are settled. The copy
  // is contiguous at `copy`, or element out_begin + i of `copy_pieces`. Returns how many odd
  // ties were settled. Throws zoff::UsageError like step_span(), or on a null copy or ext.
  size_t step_split_span(uint16_t* copy, uint16_t* ext, const float* grads, const StateSpan* states,
                         size_t n, SpanPlace place);
  size_t step_split_span(const CopyOutPieces& copy_pieces, size_t out_begin, uint16_t* ext,
                         const float* grads, const StateSpan* states, size_t n, SpanPlace place);
  void end_step();
  // Leaves a step that failed half-way without counting it (the caller restores or
  // refuses to continue; the spans already updated stay updated).
  void abort_step() { in_step_ = false; }
  bool in_step() const { return in_step_; }

  int64_t step_count() const { return step_; }
  // Throws zoff::UsageError outside [0, 2^53].
  void set_step_count(int64_t step);
  // Fills n floats with a state's initial value, split among the threads (first touch).
  void fill(float* data, size_t n, float value);

 private:
  enum class Kind { kAdam, kSgd, kAdagrad };
  template <class Body>
  void run_split(size_t n, size_t first_aligned, const Body& body);
  // Like run_split, with inner boundaries on kStateBlock multiples (int8 blocks).
  template <class Body>
  void run_split_blocks(size_t n, const Body& body);
  void check_states(const StateSpan* states, size_t n, SpanPlace place) const;
  // The step of every optimizer and state dtype over a span (StateSpans of fp32 states hold
  // their float pointers).
  void step_states(float* params, const float* grads, const StateSpan* states, size_t n,
                   const detail::CopyOutDest& out);
  // This step's update of `n` elements from element `at` of a span: params and grads point
  // at element `at`'s, the states are the span's; the rounded params go to dst with the
  // copy-out it was made for.
  using RangeKernel =
      std::function<void(float* params, const float* grads, size_t at, size_t n, uint16_t* dst)>;
  RangeKernel range_kernel(const StateSpan* states, CopyOut copy_out) const;
  size_t step_split(uint16_t* ext, const float* grads, const StateSpan* states, size_t n,
                    const detail::CopyOutDest& copy);
  void check_split(const uint16_t* ext, const float* grads, const StateSpan* states, size_t n,
                   SpanPlace place) const;

  OptimizerOptions options_;
  Kind kind_ = Kind::kAdam;
  StateDtype state_dtype_ = StateDtype::kFp32;
  std::vector<StateSpec> states_;
  ThreadPool pool_;
  int64_t step_ = 0;
  bool in_step_ = false;
  double lr_ = 0.0;
};

}  // namespace zoff::optim
