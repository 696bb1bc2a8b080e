// The split master's encoding over all 2^32 fp32 patterns: only odd ties are settled, every
// settled pattern comes back from its copy and extension, and the copy is LibTorch's bf16.
#include "zoff/optim/split_master.h"

#include <c10/util/BFloat16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace zoff::optim {
namespace {

// What one pass over a range of patterns found.
struct Tally {
  uint64_t settled = 0;     // finite patterns a split master moves (odd ties)
  uint64_t bad_settle = 0;  // patterns moved otherwise, or NaNs moved
  uint64_t lost = 0;        // settled finite patterns that did not come back
  uint64_t copy_diff = 0;   // settled finite patterns whose copy is not LibTorch's
  uint64_t nan_lost = 0;    // NaNs that did not come back as NaNs
  uint64_t first_lost = 0;
};

bool is_nan(uint32_t b) { return (b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0; }

void check_pattern(uint32_t b, Tally* t) {
  const uint32_t s = split_master_settle(b);
  const uint16_t copy = split_master_copy(s);
  const uint32_t back = split_master_join(copy, split_master_extension(s));
  if (is_nan(b)) {
    t->bad_settle += s != b;
    t->nan_lost += !is_nan(back) || !is_nan(static_cast<uint32_t>(copy) << 16);
    return;
  }
  if (s != b) (s == b + 1 && (b & 0x1FFFFu) == 0x18000u ? t->settled : t->bad_settle)++;
  if (back != s && t->lost++ == 0) t->first_lost = b;
  float f;
  std::memcpy(&f, &s, sizeof f);
  t->copy_diff += copy != c10::BFloat16(f).x;  // LibTorch's round to nearest even
}

Tally check_range(uint64_t begin, uint64_t end) {
  Tally t;
  for (uint64_t i = begin; i < end; ++i) check_pattern(static_cast<uint32_t>(i), &t);
  return t;
}

TEST(SplitMaster, EverySettledPatternComesBackAndItsCopyIsLibTorchsRounding) {
  constexpr uint64_t kAll = uint64_t{1} << 32;
  const unsigned threads = std::max(2u, std::thread::hardware_concurrency());
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      tallies[k] =
          check_range(kAll / threads * k, k + 1 == threads ? kAll : kAll / threads * (k + 1));
    });
  }
  for (auto& th : pool) th.join();
  Tally sum;
  for (const auto& t : tallies) {
    if (sum.lost == 0 && t.lost > 0) sum.first_lost = t.first_lost;
    sum.settled += t.settled;
    sum.bad_settle += t.bad_settle;
    sum.lost += t.lost;
    sum.copy_diff += t.copy_diff;
    sum.nan_lost += t.nan_lost;
  }
  EXPECT_EQ(sum.lost, 0u) << "first pattern lost: 0x" << std::hex << sum.first_lost;
  // Finite patterns with an odd upper half (2 signs x 0x7F80 finite uppers / 2) and a tie.
  EXPECT_EQ(sum.settled, 2u * 0x7F80u / 2u);
  EXPECT_EQ(sum.bad_settle, 0u);
  EXPECT_EQ(sum.copy_diff, 0u);
  EXPECT_EQ(sum.nan_lost, 0u);
}

TEST(SplitMaster, CarriesAcrossExponentsAndIntoInfinity) {
  struct Case {
    uint32_t bits;  // a settled pattern
    uint16_t copy;
  };
  for (const Case c : {Case{0x3F7FFFFFu, 0x3F80u},     // just below 1: carries into the exponent
                       Case{0x7F7FFFFFu, 0x7F80u},     // largest float: rounds up to inf
                       Case{0xFF7F8001u, 0xFF80u},     // and -inf
                       Case{0x00008001u, 0x0001u},     // subnormal carry out of zero
                       Case{0x3F808000u, 0x3F80u},     // tie, even upper: down
                       Case{0x3F818001u, 0x3F82u},     // a settled odd tie: up, as its RNE
                       Case{0x7F800000u, 0x7F80u},     // inf
                       Case{0x80000000u, 0x8000u}}) {  // -0
    EXPECT_EQ(split_master_copy(c.bits), c.copy) << std::hex << c.bits;
    EXPECT_EQ(split_master_join(c.copy, split_master_extension(c.bits)), c.bits)
        << std::hex << c.bits;
  }
  EXPECT_EQ(split_master_settle(0x3F818000u), 0x3F818001u);  // odd tie: one ulp away from zero
  EXPECT_EQ(split_master_settle(0xBF818000u), 0xBF818001u);  // negative: away from zero too
  EXPECT_EQ(split_master_settle(0x7F7F8000u), 0x7F7F8001u);  // still rounds up to inf
  EXPECT_EQ(split_master_settle(0x3F808000u), 0x3F808000u);  // even tie: kept
}

// The array functions (branch-free, vectorized) against the scalar ones of split_master.h
// at the edges: NaNs of every payload and sign, infinities, odd and even ties up to the
// largest finite values, low halves 0x7FFF / 0x8000 / 0x8001 / 0xFFFF, zeros and subnormals.
TEST(SplitMaster, ArrayFunctionsMatchTheScalarOnesAtTheEdges) {
  std::vector<uint32_t> patterns;
  for (const uint32_t sign : {0u, 0x80000000u}) {
    for (const uint32_t upper : {0x0000u, 0x0001u, 0x0080u, 0x3F80u, 0x3F81u, 0x7F7Eu, 0x7F7Fu,
                                 0x7F80u, 0x7F81u, 0x7FC0u, 0x7FFFu}) {
      for (const uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
        patterns.push_back(sign | (upper << 16) | low);
      }
    }
  }
  const size_t n = patterns.size();
  std::vector<float> values(n), written(n), back(n);
  std::memcpy(values.data(), patterns.data(), n * sizeof(float));
  written = values;
  std::vector<uint16_t> copy(n), ext(n), copy_from(n), ext_from(n);
  const size_t settled = split_master_encode(written.data(), n, copy.data(), ext.data());
  EXPECT_EQ(split_master_encode_from(values.data(), n, copy_from.data(), ext_from.data()), settled);
  split_master_decode(copy.data(), ext.data(), n, back.data());
  std::vector<float> settled_in_place = values;
  split_master_settle(settled_in_place.data(), n);
  size_t want_settled = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = split_master_settle(patterns[i]);
    want_settled += s != patterns[i];
    uint32_t w, r, t;
    std::memcpy(&w, &written[i], sizeof w);
    std::memcpy(&r, &back[i], sizeof r);
    std::memcpy(&t, &settled_in_place[i], sizeof t);
    ASSERT_EQ(w, s) << std::hex << patterns[i];
    ASSERT_EQ(t, s) << std::hex << patterns[i];
    ASSERT_EQ(copy[i], split_master_copy(s)) << std::hex << patterns[i];
    ASSERT_EQ(ext[i], split_master_extension(s)) << std::hex << patterns[i];
    ASSERT_EQ(copy_from[i], copy[i]) << std::hex << patterns[i];
    ASSERT_EQ(ext_from[i], ext[i]) << std::hex << patterns[i];
    ASSERT_EQ(r, split_master_join(copy[i], ext[i])) << std::hex << patterns[i];
  }
  EXPECT_EQ(settled, want_settled);
}

TEST(SplitMaster, ArrayEncodeAndDecodeMatchTheScalarEncoding) {
  constexpr size_t kCount = 1000;
  std::vector<float> master(kCount), back(kCount);
  std::vector<uint16_t> copy(kCount), ext(kCount);
  uint32_t x = 12345;
  for (size_t i = 0; i < kCount; ++i) {
    x = x * 1664525u + 1013904223u;
    const uint32_t b = i % 7 == 0 ? ((x & 0x3FFE0000u) | 0x18000u) : (x & 0xBFFFFFFFu);
    std::memcpy(&master[i], &b, sizeof b);
  }
  std::vector<float> original = master;
  split_master_encode(master.data(), kCount, copy.data(), ext.data());
  split_master_decode(copy.data(), ext.data(), kCount, back.data());
  for (size_t i = 0; i < kCount; ++i) {
    uint32_t b, m, r;
    std::memcpy(&b, &original[i], sizeof b);
    std::memcpy(&m, &master[i], sizeof m);
    std::memcpy(&r, &back[i], sizeof r);
    ASSERT_EQ(m, split_master_settle(b)) << i;
    ASSERT_EQ(r, m) << i;
    ASSERT_EQ(copy[i], c10::BFloat16(master[i]).x) << i;
  }
  // From a source that stays as it is: the same copies and extensions, the same count.
  std::vector<uint16_t> copy_from(kCount), ext_from(kCount);
  const std::vector<float> source = original;
  master = original;
  const size_t settled = split_master_encode(master.data(), kCount, copy.data(), ext.data());
  EXPECT_EQ(split_master_encode_from(source.data(), kCount, copy_from.data(), ext_from.data()),
            settled);
  EXPECT_GT(settled, 0u);  // every 7th pattern is an odd tie
  EXPECT_EQ(copy_from, copy);
  EXPECT_EQ(ext_from, ext);
  EXPECT_EQ(std::memcmp(source.data(), original.data(), kCount * sizeof(float)), 0);
}

}  // namespace
}  // namespace zoff::optim
