// ShardOptimizer::step_split and step_split_scattered: the split master (a bf16 copy plus a
// 16-bit extension, no fp32 master) stepped in place equals the fp32 master stepped with a
// bf16 copy-out and then settled, bit for bit, for every optimizer and state dtype, with
// the copy contiguous or in pieces; odd ties are settled and counted; bad use is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "optim_test_support.h"
#include "zoff/core/error.h"
#include "zoff/optim/copy_out_pieces.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/split_master.h"

namespace zoff::optim::split_master_step_test {
namespace {

using testing::randn;
using testing::state_bytes;

constexpr int kSplitSteps = 3;
constexpr double kLr = 1e-2;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Settles every master in place (split_master.h); returns how many moved.
size_t settle(std::vector<float>& master) {
  size_t moved = 0;
  for (float& f : master) {
    const uint32_t b = bits_of(f);
    const uint32_t s = split_master_settle(b);
    moved += s != b;
    f = float_of(s);
  }
  return moved;
}

// The copy's pieces: every 1000 elements a piece, placed in reverse order in `dest`.
struct Pieces {
  std::vector<uint16_t> dest;
  std::vector<CopyOutPiece> list;
  std::vector<size_t> where;  // dest index of element i
};

Pieces make_pieces(size_t n) {
  constexpr size_t kPiece = 1000;
  Pieces p;
  p.dest.resize(n);
  p.where.resize(n);
  size_t pos = n;
  for (size_t begin = 0; begin < n; begin += kPiece) {
    const size_t k = std::min(kPiece, n - begin);
    pos -= k;
    p.list.push_back({begin, k, p.dest.data() + pos});
    for (size_t j = 0; j < k; ++j) p.where[begin + j] = pos + j;
  }
  return p;
}

struct Case {
  std::string type;
  std::string state_dtype;
  size_t segment;
};

// Steps the fp32 master (then settles it) and the split master side by side.
void expect_split_equals_settled_fp32(const Case& c, size_t n, int threads, bool scattered) {
  SCOPED_TRACE(c.type + " " + c.state_dtype + " segment " + std::to_string(c.segment) + " n " +
               std::to_string(n) + " threads " + std::to_string(threads) +
               (scattered ? " scattered" : " contiguous"));
  OptimizerOptions o;
  o.type = c.type;
  o.state_dtype = c.state_dtype;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  auto fp32 = make_shard_optimizer(o, n, OptimizerBackend::kFused, threads, c.segment);
  auto split = make_shard_optimizer(o, n, OptimizerBackend::kFused, threads, c.segment);
  auto master = randn(n, 1);
  settle(master);
  std::vector<uint16_t> copy(n), ext(n), out(n);
  split_master_encode(std::vector<float>(master).data(), n, copy.data(), ext.data());
  Pieces pieces = make_pieces(n);
  for (size_t i = 0; i < n; ++i) pieces.dest[pieces.where[i]] = copy[i];
  const CopyOutPieces copy_pieces(pieces.list, n);
  for (int step = 0; step < kSplitSteps; ++step) {
    const auto g = randn(n, 100 + static_cast<uint64_t>(step));
    fp32->step(master.data(), g.data(), kLr, CopyOut::kBf16, out.data());
    const size_t want_settled = settle(master);
    const size_t settled = scattered
                               ? split->step_split_scattered(copy_pieces, ext.data(), g.data(), kLr)
                               : split->step_split(copy.data(), ext.data(), g.data(), kLr);
    EXPECT_EQ(settled, want_settled) << "step " << step;
    if (scattered) {
      for (size_t i = 0; i < n; ++i) copy[i] = pieces.dest[pieces.where[i]];
    }
    std::vector<float> joined(n);
    split_master_decode(copy.data(), ext.data(), n, joined.data());
    ASSERT_EQ(0, std::memcmp(joined.data(), master.data(), n * sizeof(float))) << "step " << step;
    ASSERT_EQ(copy, out) << "step " << step;  // the copy is the settled master's rounding
  }
  EXPECT_EQ(state_bytes(*fp32), state_bytes(*split));
  EXPECT_EQ(split->step_count(), kSplitSteps);
}

TEST(SplitMasterStep, EqualsTheFp32MasterSettledForEveryOptimizerAndStateDtype) {
  const std::vector<Case> cases =
      {
          {"adamw", "fp32", 0},     {"adam", "fp32", 0},  {"sgd", "fp32", 0},
          {"adagrad", "fp32", 0},   {"adamw", "bf16", 0}, {"adamw", "int8", 0},
          {"adamw", "int8", 10000},  // the block grid restarts mid-span
      };
  for (const auto& c : cases) {
    // One element; chunks of the split step (16384) and past them; two threads' ranges.
    for (size_t n : {size_t{1}, size_t{40003}, size_t{300001}}) {
      for (bool scattered : {false, true}) expect_split_equals_settled_fp32(c, n, 2, scattered);
    }
  }
}

TEST(SplitMasterStep, OnEverySimdTarget) {
  testing::for_each_simd_level([](SimdLevel) {
    expect_split_equals_settled_fp32({"adamw", "int8", 0}, 20000, 2, false);
    expect_split_equals_settled_fp32({"adamw", "fp32", 0}, 20000, 2, true);
  });
}

// SGD with lr 1 moves each master to exactly p - g: masters sent onto odd ties (bf16 ties
// with an odd upper half) are settled one ulp away from zero and counted, and their copy is
// the tie's rounding to even.
TEST(SplitMasterStep, OddTiesTheStepMakesAreSettledAndCounted) {
  const std::vector<uint32_t> ties = {0x3F818000u, 0xBF818000u, 0x40038000u, 0x00018000u};
  const size_t n = ties.size() + 2;
  OptimizerOptions o;
  o.type = "sgd";
  auto opt = make_shard_optimizer(o, n, OptimizerBackend::kFused, 1);
  std::vector<float> start(n), g(n, 0.0f);
  for (size_t i = 0; i < ties.size(); ++i) {
    start[i] = float_of(ties[i] + 3);  // same binade: p - (p - t) == t exactly
    g[i] = start[i] - float_of(ties[i]);
  }
  start[n - 2] = 1.0f;
  start[n - 1] = -2.5f;
  std::vector<uint16_t> copy(n), ext(n);
  split_master_encode(start.data(), n, copy.data(), ext.data());
  EXPECT_EQ(opt->step_split(copy.data(), ext.data(), g.data(), 1.0), ties.size());
  std::vector<float> joined(n);
  split_master_decode(copy.data(), ext.data(), n, joined.data());
  for (size_t i = 0; i < ties.size(); ++i) {
    EXPECT_EQ(bits_of(joined[i]), ties[i] + 1) << i;
    EXPECT_EQ(copy[i], split_master_copy(ties[i])) << i;
  }
  EXPECT_EQ(joined[n - 2], 1.0f);
  EXPECT_EQ(joined[n - 1], -2.5f);
}

TEST(SplitMasterStep, BadUseIsRefusedBeforeTheStepCounts) {
  OptimizerOptions o;
  auto fused = make_shard_optimizer(o, 10, OptimizerBackend::kFused, 1);
  std::vector<uint16_t> copy(10), ext(10);
  std::vector<float> g(10, 1.0f);
  EXPECT_THROW(fused->step_split(copy.data(), nullptr, g.data(), 1e-3), UsageError);
  EXPECT_THROW(fused->step_split(nullptr, ext.data(), g.data(), 1e-3), UsageError);
  EXPECT_THROW(fused->step_split(copy.data(), ext.data(), nullptr, 1e-3), UsageError);
  EXPECT_THROW(fused->step_split(copy.data(), ext.data(), g.data(), -1.0), UsageError);
  const CopyOutPieces short_copy({{0, 9, copy.data()}}, 9);
  EXPECT_THROW(fused->step_split_scattered(short_copy, ext.data(), g.data(), 1e-3), UsageError);
  EXPECT_EQ(fused->step_count(), 0);
  auto torch_backend = make_shard_optimizer(o, 10, OptimizerBackend::kTorch, 1);
  try {
    torch_backend->step_split(copy.data(), ext.data(), g.data(), 1e-3);
    ADD_FAILURE() << "the torch backend took a split master";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the split master needs the fused backend"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zoff::optim::split_master_step_test
