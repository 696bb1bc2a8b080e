// Shared helpers of the optim tests: deterministic data, tolerances, SIMD target iteration.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/simd_dispatch.h"

namespace zoff::optim::testing {

// Relative tolerance after 10 steps, against LibTorch and between fused and reference
// kernels (the bar for AdamW; every kernel meets it):
//   |ours - want| <= kRelTol * max(|want|, rms(want)).
// Elements far below the tensor's RMS are judged relative to the RMS: they are the result of
// cancellation (p0 + updates, or m summing gradients of both signs), and their rounding error
// is one ulp of the O(rms) terms that cancelled, not of the small result.
constexpr double kRelTol = 1e-6;

// Lengths and misalignments (floats past a 64-byte boundary) every kernel is tested with.
inline const std::vector<size_t> kLengths = {1, 15, 17, 1023, 1000003};
inline const std::vector<size_t> kOffsets = {0, 1, 2, 3};
constexpr int kSteps = 10;

// Deterministic normal floats (LibTorch's generator, fixed seed).
inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  torch::manual_seed(seed);
  auto t = torch::randn({static_cast<int64_t>(n)}) * scale;
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + n);
}

// A float buffer whose element 0 sits `offset` floats past a 64-byte boundary.
class OffsetSpan {
 public:
  OffsetSpan(size_t n, size_t offset) : storage_(n + offset + 16), offset_(offset) {
    auto address = reinterpret_cast<uintptr_t>(storage_.data());
    size_t pad = (64 - address % 64) % 64 / sizeof(float);
    begin_ = storage_.data() + pad + offset_;
    n_ = n;
  }
  OffsetSpan(const OffsetSpan&) = delete;
  OffsetSpan& operator=(const OffsetSpan&) = delete;
  float* data() { return begin_; }
  size_t size() const { return n_; }
  void assign(const std::vector<float>& v) { std::copy(v.begin(), v.end(), begin_); }
  std::vector<float> vec() const { return std::vector<float>(begin_, begin_ + n_); }

 private:
  std::vector<float> storage_;
  size_t offset_;
  float* begin_ = nullptr;
  size_t n_ = 0;
};

// Worst element of |got - want| / max(|want|, rms(want)) (<= kRelTol passes), and the
// norm-wise relative error ||got - want|| / ||want||.
struct Difference {
  double worst = 0;
  size_t index = 0;
  float got = 0, want = 0;
  double norm_relative = 0;
};
inline Difference relative_difference(const float* got, const float* want, size_t n) {
  double sum_sq = 0, diff_sq = 0;
  for (size_t i = 0; i < n; ++i) sum_sq += static_cast<double>(want[i]) * want[i];
  const double rms = std::sqrt(sum_sq / static_cast<double>(std::max<size_t>(n, 1)));
  Difference d;
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    diff_sq += diff * diff;
    const double scale = std::max(std::fabs(static_cast<double>(want[i])), rms);
    const double rel = diff == 0 ? 0.0 : diff / scale;
    if (!(rel <= d.worst)) {  // also catches NaN
      d.worst = std::isnan(rel) ? INFINITY : rel;
      d.index = i;
      d.got = got[i];
      d.want = want[i];
    }
  }
  d.norm_relative = sum_sq > 0 ? std::sqrt(diff_sq / sum_sq) : std::sqrt(diff_sq);
  return d;
}

#define EXPECT_WITHIN_TOLERANCE(GOT, WANT, COUNT, WHAT)                                         \
  do {                                                                                          \
    const auto zoff_diff = ::zoff::optim::testing::relative_difference((GOT), (WANT), (COUNT)); \
    EXPECT_LE(zoff_diff.worst, ::zoff::optim::testing::kRelTol)                                 \
        << (WHAT) << ": worst relative difference " << zoff_diff.worst << " at element "        \
        << zoff_diff.index << " (" << zoff_diff.got << " vs " << zoff_diff.want << ")";         \
  } while (0)

// Every stored state of `opt` as bytes, its int8 scales as "<name>.scales": two optimizers
// hold the same states when these are equal.
inline std::map<std::string, std::vector<char>> state_bytes(ShardOptimizer& opt) {
  std::map<std::string, std::vector<char>> out;
  for (auto& [name, st] : opt.stored_state_buffers()) {
    const char* data = static_cast<const char*>(st.data);
    out[name].assign(data, data + st.bytes);
    const char* scales = reinterpret_cast<const char*>(st.scales);
    out[name + ".scales"].assign(scales, scales + st.num_scales * sizeof(float));
  }
  return out;
}

// Runs `body` once per SIMD level this CPU supports, with that level forced; afterwards the
// level from ZOFF_SIMD (or the best) is active again.
inline void for_each_simd_level(const std::function<void(SimdLevel)>& body) {
  for (SimdLevel level : supported_simd_levels()) {
    force_simd_level(level);
    SCOPED_TRACE("SIMD level " + simd_level_name(level) + " (" + active_simd_target() + ")");
    body(level);
  }
  apply_simd_level_from_env();
}

}  // namespace zoff::optim::testing
