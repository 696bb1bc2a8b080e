// ShardOptimizer::step_scattered: the 16-bit copy-out written piece by piece equals the
// contiguous copy-out scattered afterwards, bit for bit, for every optimizer, state dtype and
// backend, with pieces cut anywhere (inside a vector, inside an int8 block, one element);
// and bad pieces are refused naming the piece.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "optim_test_support.h"
#include "zoff/core/error.h"
#include "zoff/optim/copy_out_pieces.h"
#include "zoff/optim/shard_optimizer.h"

namespace zoff::optim::scattered_copy_out_test {
namespace {

using testing::randn;
using testing::state_bytes;

constexpr int kScatterSteps = 3;

// Piece lengths that cut a span of n elements everywhere the kernels could care about:
// single elements, less than a vector, across an int8 block boundary, whole blocks.
std::vector<size_t> piece_lengths(size_t n, uint64_t seed) {
  const std::vector<size_t> pattern = {1, 7, 2049, 16, 4096, 3, 2047, 6000, 1, 33};
  std::mt19937_64 rng(seed);
  std::vector<size_t> lengths;
  for (size_t at = 0, i = rng() % pattern.size(); at < n; ++i) {
    const size_t k = std::min(pattern[i % pattern.size()], n - at);
    lengths.push_back(k);
    at += k;
  }
  return lengths;
}

// Pieces over `lengths`, placed in `dest` in reverse order with a gap after each (so a write
// to the wrong place shows), and the contiguous index each dest element stands for (-1: gap).
struct Scatter {
  std::vector<uint16_t> dest;
  std::vector<int64_t> source;
  std::vector<CopyOutPiece> pieces;
};

Scatter make_scatter(const std::vector<size_t>& lengths, size_t n) {
  constexpr size_t kGap = 5;
  Scatter s;
  s.dest.assign(n + kGap * lengths.size(), 0xABCD);
  s.source.assign(s.dest.size(), -1);
  std::vector<size_t> at(lengths.size());
  size_t pos = 0;
  for (size_t i = lengths.size(); i-- > 0;) {
    at[i] = pos;
    pos += lengths[i] + kGap;
  }
  size_t begin = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    s.pieces.push_back({begin, lengths[i], s.dest.data() + at[i]});
    for (size_t j = 0; j < lengths[i]; ++j) s.source[at[i] + j] = static_cast<int64_t>(begin + j);
    begin += lengths[i];
  }
  return s;
}

struct Case {
  std::string type;
  std::string state_dtype;
  OptimizerBackend backend;
  size_t segment;
};

void expect_scattered_equals_contiguous(const Case& c, size_t n, int threads) {
  SCOPED_TRACE(c.type + " " + c.state_dtype + " segment " + std::to_string(c.segment) + " n " +
               std::to_string(n) + " threads " + std::to_string(threads));
  OptimizerOptions o;
  o.type = c.type;
  o.state_dtype = c.state_dtype;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  auto contiguous = make_shard_optimizer(o, n, c.backend, threads, c.segment);
  auto scattered = make_shard_optimizer(o, n, c.backend, threads, c.segment);
  auto p_a = randn(n, 1);
  auto p_b = p_a;
  const auto lengths = piece_lengths(n, n);
  Scatter s = make_scatter(lengths, n);
  const CopyOutPieces pieces(s.pieces, n);
  std::vector<uint16_t> out(n);
  for (int step = 0; step < kScatterSteps; ++step) {
    const auto g = randn(n, 100 + static_cast<uint64_t>(step));
    contiguous->step(p_a.data(), g.data(), 1e-2, CopyOut::kBf16, out.data());
    scattered->step_scattered(p_b.data(), g.data(), 1e-2, CopyOut::kBf16, pieces);
    ASSERT_EQ(0, std::memcmp(p_a.data(), p_b.data(), n * sizeof(float))) << "step " << step;
    for (size_t i = 0; i < s.dest.size(); ++i) {
      const uint16_t want = s.source[i] < 0 ? 0xABCD : out[static_cast<size_t>(s.source[i])];
      ASSERT_EQ(want, s.dest[i]) << "step " << step << " dest element " << i << " (element "
                                 << s.source[i] << ")";
    }
  }
  EXPECT_EQ(state_bytes(*contiguous), state_bytes(*scattered));
  EXPECT_EQ(contiguous->step_count(), scattered->step_count());
}

TEST(ScatteredCopyOut, EqualsTheContiguousCopyOutScatteredForEveryOptimizerAndStateDtype) {
  const std::vector<Case> cases = {
      {"adamw", "fp32", OptimizerBackend::kFused, 0},
      {"adam", "fp32", OptimizerBackend::kFused, 0},
      {"sgd", "fp32", OptimizerBackend::kFused, 0},
      {"adagrad", "fp32", OptimizerBackend::kFused, 0},
      {"adamw", "bf16", OptimizerBackend::kFused, 0},
      {"adamw", "int8", OptimizerBackend::kFused, 0},
      {"adamw", "int8", OptimizerBackend::kFused, 10000},  // the block grid restarts mid-span
      {"adamw", "fp32", OptimizerBackend::kTorch, 0},
  };
  for (const auto& c : cases) {
    for (size_t n : {size_t{1}, size_t{2049}, size_t{40003}}) {
      for (int threads : {1, 3}) expect_scattered_equals_contiguous(c, n, threads);
    }
  }
}

TEST(ScatteredCopyOut, OnEverySimdTarget) {
  testing::for_each_simd_level([](SimdLevel) {
    expect_scattered_equals_contiguous({"adamw", "int8", OptimizerBackend::kFused, 0}, 20000, 2);
    expect_scattered_equals_contiguous({"adamw", "fp32", OptimizerBackend::kFused, 0}, 20000, 2);
  });
}

TEST(ScatteredCopyOut, BadPiecesAreRefusedNamingThePiece) {
  std::vector<uint16_t> a(10), b(10);
  auto refused = [](std::vector<CopyOutPiece> pieces, size_t n, const std::string& want) {
    try {
      CopyOutPieces p(std::move(pieces), n);
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused({{0, 4, a.data()}, {5, 5, b.data()}}, 10, "piece 1 starts at element 5");
  refused({{0, 6, a.data()}, {4, 6, b.data()}}, 10, "piece 1 starts at element 4");
  refused({{0, 4, a.data()}, {4, 6, nullptr}}, 10, "piece 1 (elements [4, 10)) has no destination");
  refused({{0, 4, a.data()}}, 10, "cover 4 elements: the span has 10");
  refused({{0, 10, a.data()}, {10, 1, b.data()}}, 10, "cover 11 elements: the span has 10");

  OptimizerOptions o;
  auto opt = make_shard_optimizer(o, 10, OptimizerBackend::kFused, 1);
  std::vector<float> p(10, 1.0f), g(10, 1.0f);
  const CopyOutPieces short_out({{0, 9, a.data()}}, 9);
  EXPECT_THROW(opt->step_scattered(p.data(), g.data(), 1e-3, CopyOut::kBf16, short_out),
               UsageError);
  EXPECT_EQ(opt->step_count(), 0);  // refused before the step began
}

}  // namespace
}  // namespace zoff::optim::scattered_copy_out_test
