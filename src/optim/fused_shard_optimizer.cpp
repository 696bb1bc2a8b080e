// The fused backend of ShardOptimizer: a SpanOptimizer over the whole shard and the state it owns.
#include <algorithm>
#include <string>
#include <vector>

#include "shard_optimizer_backends.h"
#include "zoff/core/error.h"
#include "zoff/optim/aligned_floats.h"
#include "zoff/optim/simd_dispatch.h"
#include "zoff/optim/span_optimizer.h"

namespace zoff::optim::detail {
namespace {

// Bytes of the values or codes of one state of n elements (int8: without the scales).
size_t data_bytes(StateDtype dtype, size_t n) {
  return dtype == StateDtype::kFp32   ? n * sizeof(float)
         : dtype == StateDtype::kBf16 ? n * sizeof(uint16_t)
                                      : n;
}

// Int8 blocks of n elements whose grid starts again every `segment` elements (0 only for
// an empty shard).
size_t segmented_blocks(size_t n, size_t segment) {
  if (segment == 0) return 0;
  return n / segment * state_blocks(segment) + state_blocks(n % segment);
}

// One state as stored: values or codes and, for int8, block scales. bf16 and int8 data live
// in float-typed storage for its alignment (64 bytes, 2 MiB and huge pages when large); they
// are only ever read as their own type. Owned (AlignedFloats), or in memory a StateMemory
// gave.
struct StoredSpan {
  AlignedFloats owned_data;
  AlignedFloats owned_scales;
  float* data = nullptr;    // data_bytes(dtype, numel) bytes, rounded up to whole floats
  float* scales = nullptr;  // int8: num_scales block scales; else none
  size_t num_scales = 0;
};

// `floats` floats of state `name` (and `blocks` scales), where `memory` says or owned.
StoredSpan make_stored_span(const std::string& name, size_t floats, size_t blocks,
                            const StateMemory& memory) {
  StoredSpan st;
  st.num_scales = blocks;
  if (!memory) {
    st.owned_data = AlignedFloats(floats);
    st.owned_scales = AlignedFloats(blocks);
    st.data = st.owned_data.data();
    st.scales = st.owned_scales.data();
    return st;
  }
  st.data = static_cast<float*>(memory(name, floats * sizeof(float)));
  if (blocks > 0) st.scales = static_cast<float*>(memory(name + ".scales", blocks * sizeof(float)));
  return st;
}

class FusedShardOptimizer final : public ShardOptimizer {
 public:
  FusedShardOptimizer(const OptimizerOptions& options, size_t numel, int threads,
                      size_t segment_numel, const StateMemory& memory)
      : numel_(numel),
        segment_(segment_numel == 0 || segment_numel > numel ? numel : segment_numel),
        span_(options, threads),
        dtype_(span_.state_dtype()) {
    const size_t floats = (data_bytes(dtype_, numel_) + sizeof(float) - 1) / sizeof(float);
    const size_t blocks = dtype_ == StateDtype::kInt8 ? segmented_blocks(numel_, segment_) : 0;
    for (const auto& spec : span_.states()) {
      // Compressed states are Adam's, which start at 0: all-zero bytes in every format.
      const float initial = dtype_ == StateDtype::kFp32 ? spec.initial : 0.0f;
      state_.push_back(make_stored_span(spec.name, floats, blocks, memory));
      span_.fill(state_.back().data, floats, initial);
      span_.fill(state_.back().scales, blocks, 0.0f);
      pointers_.push_back(state_.back().data);
      spans_.push_back({state_.back().data, state_.back().scales});
    }
  }

  void step(float* params, const float* grads, double lr, CopyOut copy_out,
            uint16_t* out16) override {
    check_step_arguments(params, grads, lr, copy_out, out16, numel_);
    counted_step(lr, [&] {
      if (dtype_ == StateDtype::kFp32) {
        span_.step_span(params, grads, pointers_.data(), numel_, copy_out, out16);
      } else {
        step_segments([&](size_t b, size_t n, const StateSpan* at) {
          span_.step_span(params + b, grads + b, at, n, SpanPlace{0, n}, copy_out,
                          copy_out == CopyOut::kNone ? nullptr : out16 + b);
        });
      }
    });
  }

  // The fp32 states too go through their StateSpans here: one path cuts every dtype's span
  // into runs inside the pieces.
  void step_scattered(float* params, const float* grads, double lr, CopyOut copy_out,
                      const CopyOutPieces& out) override {
    check_step_arguments(params, grads, lr, CopyOut::kNone, nullptr, numel_);
    check_scattered_out(out, numel_);
    counted_step(lr, [&] {
      step_segments([&](size_t b, size_t n, const StateSpan* at) {
        span_.step_span(params + b, grads + b, at, n, SpanPlace{0, n}, copy_out, out, b);
      });
    });
  }

  size_t step_split(uint16_t* copy, uint16_t* ext, const float* grads, double lr) override {
    size_t settled = 0;
    counted_step(lr, [&] {
      step_segments([&](size_t b, size_t n, const StateSpan* at) {
        settled += span_.step_split_span(
            copy == nullptr ? nullptr : copy + b, ext == nullptr ? nullptr : ext + b,
            grads == nullptr ? nullptr : grads + b, at, n, SpanPlace{0, n});
      });
    });
    return settled;
  }

  size_t step_split_scattered(const CopyOutPieces& copy_pieces, uint16_t* ext, const float* grads,
                              double lr) override {
    check_scattered_out(copy_pieces, numel_);
    size_t settled = 0;
    counted_step(lr, [&] {
      step_segments([&](size_t b, size_t n, const StateSpan* at) {
        settled +=
            span_.step_split_span(copy_pieces, b, ext == nullptr ? nullptr : ext + b,
                                  grads == nullptr ? nullptr : grads + b, at, n, SpanPlace{0, n});
      });
    });
    return settled;
  }

  size_t numel() const override { return numel_; }
  int64_t step_count() const override { return span_.step_count(); }

  size_t state_bytes() const override {
    size_t bytes = 0;
    for (const auto& st : state_)
      bytes += data_bytes(dtype_, numel_) + st.num_scales * sizeof(float);
    return bytes;
  }

  std::map<std::string, float*> state_buffers() override {
    ZOFF_CHECK(dtype_ == StateDtype::kFp32, "optimizer: state_buffers() are float buffers, but ",
               "the states are ", state_dtype_name(dtype_), ": use stored_state_buffers()");
    std::map<std::string, float*> buffers;
    for (size_t i = 0; i < state_.size(); ++i) buffers[span_.states()[i].name] = pointers_[i];
    return buffers;
  }

  std::map<std::string, StoredState> stored_state_buffers() override {
    std::map<std::string, StoredState> stored;
    for (size_t i = 0; i < state_.size(); ++i) {
      stored[span_.states()[i].name] = {
          dtype_,           pointers_[i],         data_bytes(dtype_, numel_),
          state_[i].scales, state_[i].num_scales, segment_};
    }
    return stored;
  }

  void set_step_count(int64_t step) override { span_.set_step_count(step); }

  std::string name() const override {
    const std::string states =
        dtype_ == StateDtype::kFp32 ? "" : ", " + state_dtype_name(dtype_) + " states";
    return span_.options().type + " (fused, " + active_simd_target() + ", " +
           std::to_string(span_.threads()) + " threads" + states + ")";
  }

 private:
  // One optimizer step around body(): counted once it completes; a throw leaves the step
  // count where it was.
  template <class Body>
  void counted_step(double lr, const Body& body) {
    span_.begin_step(lr);
    try {
      body();
    } catch (...) {
      span_.abort_step();
      throw;
    }
    span_.end_step();
  }

  // One span per segment, each placed as a shard of its own so that its int8 blocks start at
  // its first element (bf16 and fp32, elementwise, do not care): step(b, n, states at b).
  template <class StepSpan>
  void step_segments(const StepSpan& step) {
    const size_t elem = stored_element_bytes(dtype_);
    std::vector<StateSpan> at(spans_.size());
    size_t first_scale = 0;
    for (size_t b = 0; b < numel_; b += segment_) {
      const size_t n = std::min(segment_, numel_ - b);
      for (size_t i = 0; i < spans_.size(); ++i) {
        at[i].data = static_cast<char*>(spans_[i].data) + b * elem;
        at[i].scales = dtype_ == StateDtype::kInt8 ? spans_[i].scales + first_scale : nullptr;
      }
      step(b, n, at.data());
      first_scale += state_blocks(n);
    }
  }

  size_t numel_;
  size_t segment_;  // int8 block grid restarts every segment_ elements (numel_: once)
  SpanOptimizer span_;
  StateDtype dtype_;
  std::vector<StoredSpan> state_;  // in span_.states() order
  std::vector<float*> pointers_;   // state_[i].data as float*, for the fp32 path
  std::vector<StateSpan> spans_;   // the same with scales, for bf16 / int8
};

}  // namespace

std::unique_ptr<ShardOptimizer> make_fused_shard_optimizer(const OptimizerOptions& options,
                                                           size_t numel, int threads,
                                                           size_t segment_numel,
                                                           const StateMemory& memory) {
  return std::make_unique<FusedShardOptimizer>(options, numel, threads, segment_numel, memory);
}

}  // namespace zoff::optim::detail
