// The split master's encoding over all 2^32 fp32 patterns: the bf16 copy is LibTorch's
// round-to-nearest-even except at ties, and the copy plus the extension give the pattern back.
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
  uint64_t lost = 0;        // patterns that did not come back, signalling NaNs aside
  uint64_t quieted = 0;     // signalling NaNs with their payload in the low half
  uint64_t ties = 0;        // finite patterns whose copy is not LibTorch's (ties, odd upper)
  uint64_t other_diff = 0;  // finite patterns whose copy differs from LibTorch's otherwise
  uint64_t first_lost = 0;
};

bool is_nan(uint32_t b) { return (b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0; }

Tally check_range(uint64_t begin, uint64_t end) {
  Tally t;
  for (uint64_t i = begin; i < end; ++i) {
    const auto b = static_cast<uint32_t>(i);
    const uint16_t copy = split_master_copy(b);
    const uint32_t back = split_master_join(copy, split_master_extension(b));
    const bool low_payload_snan = is_nan(b) && ((b >> 16) & 0x7Fu) == 0;
    if (low_payload_snan) {
      t.quieted += back == (b | 0x00400000u);
    } else if (back != b) {
      if (t.lost++ == 0) t.first_lost = b;
    }
    if (is_nan(b)) continue;
    float f;
    std::memcpy(&f, &b, sizeof f);
    const uint16_t rne = c10::BFloat16(f).x;  // LibTorch's round to nearest even
    if (copy == rne) continue;
    const bool tie = (b & 0xFFFFu) == 0x8000u && ((b >> 16) & 1u) == 1u;
    (tie && copy == rne - 1 ? t.ties : t.other_diff)++;
  }
  return t;
}

TEST(SplitMaster, EveryPatternComesBackAndTheCopyIsLibTorchsRoundingExceptAtTies) {
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
    sum.lost += t.lost;
    sum.quieted += t.quieted;
    sum.ties += t.ties;
    sum.other_diff += t.other_diff;
  }
  EXPECT_EQ(sum.lost, 0u) << "first pattern lost: 0x" << std::hex << sum.first_lost;
  // Signalling NaNs with upper half 0x7F80 / 0xFF80 and a nonzero low half: 2 x 65535.
  EXPECT_EQ(sum.quieted, 2u * 65535u);
  // Finite patterns with an odd upper half (2 signs x 0x7F80 finite uppers / 2) and a tie.
  EXPECT_EQ(sum.ties, 2u * 0x7F80u / 2u);
  EXPECT_EQ(sum.other_diff, 0u);
}

TEST(SplitMaster, CarriesAcrossExponentsAndIntoInfinity) {
  struct Case {
    uint32_t bits;
    uint16_t copy;
  };
  for (const Case c : {Case{0x3F7FFFFFu, 0x3F80u},     // just below 1: carries into the exponent
                       Case{0x7F7FFFFFu, 0x7F80u},     // largest float: rounds up to inf
                       Case{0xFF7F8001u, 0xFF80u},     // and -inf
                       Case{0x00008001u, 0x0001u},     // subnormal carry out of zero
                       Case{0x3F808000u, 0x3F80u},     // tie, even upper: down (as RNE)
                       Case{0x3F818000u, 0x3F81u},     // tie, odd upper: down (RNE: up)
                       Case{0x7F800000u, 0x7F80u},     // inf
                       Case{0x7FC01234u, 0x7FC0u}}) {  // quiet NaN: its upper half
    EXPECT_EQ(split_master_copy(c.bits), c.copy) << std::hex << c.bits;
    EXPECT_EQ(split_master_join(c.copy, split_master_extension(c.bits)), c.bits)
        << std::hex << c.bits;
  }
}

}  // namespace
}  // namespace zoff::optim
