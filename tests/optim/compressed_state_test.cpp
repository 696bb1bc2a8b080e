// ShardOptimizer and SpanOptimizer with bf16 / int8 states: bytes, resume, spans, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "optim_test_support.h"
#include "zoff/core/error.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/span_optimizer.h"

namespace zoff::optim::compressed_state_test {
namespace {

using testing::randn;

OptimizerOptions options_with(const std::string& state_dtype) {
  OptimizerOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  o.state_dtype = state_dtype;
  return o;
}

std::vector<std::vector<float>> make_grads(size_t n, int steps) {
  std::vector<std::vector<float>> grads;
  for (int s = 0; s < steps; ++s) grads.push_back(randn(n, 500 + s, 0.1f));
  return grads;
}

void run(ShardOptimizer& opt, float* p, const std::vector<std::vector<float>>& grads, int first,
         int last) {
  for (int s = first; s <= last; ++s) {
    opt.step(p, grads[static_cast<size_t>(s - 1)].data(), 1e-2, CopyOut::kNone, nullptr);
  }
}

// bf16: 2 + 2 bytes per parameter; int8: 1 + 1 plus one 4-byte scale per 2048-element block.
TEST(CompressedStates, StateBytesPerDtype) {
  const size_t n = 10000;  // 5 blocks, the last partial
  auto bytes = [&](const std::string& dtype) {
    return make_shard_optimizer(options_with(dtype), n, OptimizerBackend::kFused, 1)->state_bytes();
  };
  EXPECT_EQ(bytes("fp32"), 2 * 4 * n);
  EXPECT_EQ(bytes("bf16"), 2 * 2 * n);
  EXPECT_EQ(bytes("int8"), 2 * (n + 5 * 4));
  EXPECT_EQ(
      make_shard_optimizer(options_with("int8"), 0, OptimizerBackend::kFused, 1)->state_bytes(),
      0u);
  auto stored = make_shard_optimizer(options_with("int8"), n, OptimizerBackend::kFused, 1)
                    ->stored_state_buffers();
  ASSERT_EQ(stored.size(), 2u);
  for (auto& [name, state] : stored) {
    EXPECT_EQ(state.dtype, StateDtype::kInt8) << name;
    EXPECT_EQ(state.bytes, n) << name;
    EXPECT_EQ(state.num_scales, 5u) << name;
  }
}

// A checkpoint of compressed states is their bytes and scales: restoring them continues
// exactly as if there had been no interruption (and fp32 through the same interface).
TEST(CompressedStates, ResumeThroughStoredStateBuffersIsExact) {
  const size_t n = 4099;
  const auto p0 = randn(n, 31);
  const auto grads = make_grads(n, 8);
  for (const char* dtype : {"fp32", "bf16", "int8"}) {
    SCOPED_TRACE(dtype);
    const auto o = options_with(dtype);
    auto whole = p0;
    run(*make_shard_optimizer(o, n, OptimizerBackend::kFused, 2), whole.data(), grads, 1, 8);

    auto resumed = p0;
    auto first = make_shard_optimizer(o, n, OptimizerBackend::kFused, 2);
    run(*first, resumed.data(), grads, 1, 4);
    std::map<std::string, std::pair<std::vector<char>, std::vector<float>>> saved;
    for (auto& [name, s] : first->stored_state_buffers()) {
      const auto* bytes = static_cast<const char*>(s.data);
      saved[name] = {{bytes, bytes + s.bytes}, {s.scales, s.scales + s.num_scales}};
    }
    auto second = make_shard_optimizer(o, n, OptimizerBackend::kFused, 2);
    second->set_step_count(first->step_count());
    for (auto& [name, s] : second->stored_state_buffers()) {
      ASSERT_TRUE(saved.count(name)) << name;
      std::memcpy(s.data, saved[name].first.data(), s.bytes);
      std::copy(saved[name].second.begin(), saved[name].second.end(), s.scales);
    }
    run(*second, resumed.data(), grads, 5, 8);
    EXPECT_EQ(0, std::memcmp(resumed.data(), whole.data(), n * sizeof(float)));
  }
}

// Threads split int8 states on block boundaries and bf16 anywhere: results do not change.
TEST(CompressedStates, EmptyShardSteps) {
  for (const char* dtype : {"bf16", "int8"}) {
    auto opt = make_shard_optimizer(options_with(dtype), 0, OptimizerBackend::kFused, 2);
    opt->step(nullptr, nullptr, 1e-3, CopyOut::kBf16, nullptr);
    EXPECT_EQ(opt->step_count(), 1) << dtype;
  }
}

TEST(CompressedStates, ThreadCountDoesNotChangeResults) {
  const size_t n = 300007;
  const auto p0 = randn(n, 32);
  const auto grads = make_grads(n, 3);
  for (const char* dtype : {"bf16", "int8"}) {
    SCOPED_TRACE(dtype);
    std::vector<float> reference;
    for (int threads : {1, 2, 3}) {
      auto p = p0;
      run(*make_shard_optimizer(options_with(dtype), n, OptimizerBackend::kFused, threads),
          p.data(), grads, 1, 3);
      if (reference.empty()) reference = p;
      EXPECT_EQ(0, std::memcmp(p.data(), reference.data(), n * sizeof(float))) << threads;
    }
  }
}

// Int8 states owned by the caller, stepped in block-aligned spans (as a tier streams them),
// equal the whole shard stepped at once.
TEST(CompressedStates, SpansCutOnBlocksEqualTheWholeShard) {
  const size_t n = 3 * kStateBlock + 100;
  const auto p0 = randn(n, 33);
  const auto grads = make_grads(n, 3);
  const auto o = options_with("int8");
  auto whole = p0;
  run(*make_shard_optimizer(o, n, OptimizerBackend::kFused, 1), whole.data(), grads, 1, 3);

  SpanOptimizer span(o, 2);
  auto p = p0;
  std::vector<int8_t> m(n, 0);
  std::vector<uint8_t> v(n, 0);
  std::vector<float> m_scales(state_blocks(n), 0.0f), v_scales(state_blocks(n), 0.0f);
  for (int s = 1; s <= 3; ++s) {
    span.begin_step(1e-2);
    for (size_t begin : {size_t{2} * kStateBlock, size_t{0}}) {  // any order
      const size_t len = begin == 0 ? 2 * kStateBlock : n - begin;
      const size_t b = begin / kStateBlock;
      const StateSpan states[2] = {{m.data() + begin, m_scales.data() + b},
                                   {v.data() + begin, v_scales.data() + b}};
      span.step_span(p.data() + begin, grads[s - 1].data() + begin, states, len,
                     SpanPlace{begin, n}, CopyOut::kNone, nullptr);
    }
    span.end_step();
  }
  EXPECT_EQ(0, std::memcmp(p.data(), whole.data(), n * sizeof(float)));
}

// An optimizer whose int8 block grid restarts every `segment` elements (stage 0's whole
// buffer cut at the ranks' shards) holds, segment by segment, exactly the codes and scales
// of separate optimizers over each segment, and updates the parameters the same way. The
// segments here span several blocks and are not block multiples; the last is shorter.
TEST(CompressedStates, SegmentedGridEqualsOneOptimizerPerSegment) {
  const size_t segment = 2 * kStateBlock + 333;
  const size_t n = 3 * segment - 1000;
  const auto p0 = randn(n, 34);
  const auto grads = make_grads(n, 3);
  for (const char* dtype : {"bf16", "int8"}) {
    SCOPED_TRACE(dtype);
    const auto o = options_with(dtype);
    auto whole = p0;
    auto segmented = make_shard_optimizer(o, n, OptimizerBackend::kFused, 2, segment);
    run(*segmented, whole.data(), grads, 1, 3);
    const auto stored = segmented->stored_state_buffers();
    size_t first_scale = 0;
    for (size_t b = 0; b < n; b += segment) {
      const size_t len = std::min(segment, n - b);
      auto p = std::vector<float>(p0.begin() + b, p0.begin() + b + len);
      std::vector<std::vector<float>> g;
      for (const auto& step : grads) g.emplace_back(step.begin() + b, step.begin() + b + len);
      auto alone = make_shard_optimizer(o, len, OptimizerBackend::kFused, 1);
      run(*alone, p.data(), g, 1, 3);
      EXPECT_EQ(0, std::memcmp(p.data(), whole.data() + b, len * sizeof(float))) << b;
      const size_t elem = std::string(dtype) == "bf16" ? 2 : 1;
      for (auto& [name, st] : alone->stored_state_buffers()) {
        const auto& big = stored.at(name);
        EXPECT_EQ(big.segment_numel, segment);
        EXPECT_EQ(0, std::memcmp(st.data, static_cast<char*>(big.data) + b * elem, st.bytes));
        if (st.num_scales == 0) continue;
        EXPECT_EQ(0,
                  std::memcmp(st.scales, big.scales + first_scale, st.num_scales * sizeof(float)));
      }
      first_scale += state_blocks(len);
    }
    const size_t scales = std::string(dtype) == "int8" ? first_scale : 0;
    EXPECT_EQ(stored.at("exp_avg").num_scales, scales);
  }
}

// Each bad input is a one-line zoff::UsageError that names the bad value.
void expect_usage_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error, wanted one naming " << needle;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(CompressedStates, BadInputIsAUsageErrorNamingTheValue) {
  expect_usage_error(
      [] { make_shard_optimizer(options_with("fp8"), 16, OptimizerBackend::kFused, 1); },
      "state_dtype = 'fp8'");
  expect_usage_error(
      [] { make_shard_optimizer(options_with("int8"), 16, OptimizerBackend::kTorch, 1); },
      "state_dtype = 'int8'");
  expect_usage_error(
      [] {
        auto o = options_with("bf16");
        o.type = "sgd";
        make_shard_optimizer(o, 16, OptimizerBackend::kFused, 1);
      },
      "state_dtype = 'bf16'");

  const size_t n = 2 * kStateBlock + 5;
  SpanOptimizer span(options_with("int8"), 1);
  std::vector<float> p(n, 1.0f), g(n, 0.1f), scales(3, 0.0f);
  std::vector<int8_t> codes(n, 0);
  const StateSpan states[2] = {{codes.data(), scales.data()}, {codes.data(), scales.data()}};
  span.begin_step(1e-3);
  auto step = [&](size_t begin, size_t len, size_t shard) {
    return [&, begin, len, shard] {
      span.step_span(p.data(), g.data(), states, len, SpanPlace{begin, shard}, CopyOut::kNone,
                     nullptr);
    };
  };
  expect_usage_error(step(100, 2048, n), "span [100, 2148)");  // starts inside a block
  expect_usage_error(step(0, 2047, n), "span [0, 2047)");      // ends inside one, not the end
  expect_usage_error(step(2048, 2048, 3000), "span [2048, 4096) lies outside");
  float* floats[2] = {p.data(), g.data()};
  expect_usage_error(
      [&] { span.step_span(p.data(), g.data(), floats, 4, CopyOut::kNone, nullptr); },
      "state_dtype = 'int8'");
  span.abort_step();
  EXPECT_EQ(span.step_count(), 0);
  EXPECT_EQ(p[0], 1.0f) << "a refused span touches nothing";

  auto opt = make_shard_optimizer(options_with("bf16"), 16, OptimizerBackend::kFused, 1);
  EXPECT_THROW(opt->state_buffers(), Error);  // bf16 states are no float buffers
}

}  // namespace
}  // namespace zoff::optim::compressed_state_test
