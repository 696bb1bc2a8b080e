// make_tier_unit_pieces: stage-3 pieces written to a tier, read back on demand, and the read
// buffers of pieces done reused for the next reads (within the read-ahead's budget; dropped
// before the optimizer step unless kept between steps).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "offload/offload_test_support.h"
#include "zoff/engine/unit_pieces.h"
#include "zoff/offload/tier.h"
#include "zoff/partition/model_layout.h"

namespace zoff::engine::tier_unit_pieces_test {
namespace {

constexpr int64_t kBlock = 300000;  // elements per parameter: 600 KB of bf16 per piece
constexpr size_t kAlignment = 4096;

// Three equal units and one twice as large, world 1 (a piece is the whole unit).
struct Fixture {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  partition::ModelLayout layout;
  offload::testing::TempDir dir;
  std::unique_ptr<offload::Tier> tier;
  std::unique_ptr<offload::TierRegion> region;
  std::unique_ptr<UnitPieces> pieces;

  static std::vector<std::pair<std::string, torch::Tensor>> params() {
    torch::manual_seed(3);
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (int i = 0; i < 4; ++i) {
      named.emplace_back("p" + std::to_string(i), torch::randn({i == 3 ? 2 * kBlock : kBlock}));
    }
    return named;
  }
  explicit Fixture(int64_t max_in_cpu = 0, bool keep_between_steps = false)
      : named(params()),
        layout(named, {{"a", {0}}, {"b", {1}}, {"c", {2}}, {"d", {3}}}, 1, true),
        tier(offload::make_nvme_tier(dir.path(), "pieces", {})),
        region(tier->allocate("params", layout.shard_size() * 2)),
        pieces(make_tier_unit_pieces(layout, *region, kAlignment, torch::kBFloat16, max_in_cpu,
                                     nullptr, keep_between_steps)) {
    // Filled in shard-space order (units are laid out last first).
    std::vector<size_t> order(layout.units().size());
    for (size_t u = 0; u < order.size(); ++u) order[u] = u;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return layout.units()[a].shard_offset < layout.units()[b].shard_offset;
    });
    for (const size_t u : order) pieces->fill(u, named[u].second.to(torch::kBFloat16));
    pieces->finish_fill();
  }
};

TEST(TierUnitPieces, ReadsBackWhatWasFilledReusingTheBuffersOfPiecesDone) {
  Fixture f;
  const auto& units = f.layout.units();
  auto first = f.pieces->get(0);
  EXPECT_TRUE(torch::equal(first, f.named[0].second.to(torch::kBFloat16)));
  const void* buffer = first.data_ptr();
  first = torch::Tensor();
  f.pieces->done(0);
  EXPECT_GT(f.pieces->spare_bytes(), 0u);
  // Unit 1 is as large (its blocks may straddle differently): it reads into unit 0's buffer.
  auto second = f.pieces->get(1);
  EXPECT_TRUE(torch::equal(second, f.named[1].second.to(torch::kBFloat16)));
  // A piece starts within the first aligned block of its (aligned) buffer.
  const auto block_of = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / kAlignment; };
  EXPECT_EQ(block_of(second.data_ptr()), block_of(buffer)) << "a new buffer, not the spare";
  EXPECT_EQ(f.pieces->spare_bytes(), 0u);
  f.pieces->done(1);
  // The large unit cannot use it: read fresh, and right.
  auto large = f.pieces->get(3);
  EXPECT_TRUE(torch::equal(large, f.named[3].second.to(torch::kBFloat16)));
  f.pieces->done(3);
  EXPECT_LE(f.pieces->spare_bytes(), 2 * (units[3].shard_size * 2 + 2 * kAlignment));
  f.pieces->drop_spares();
  EXPECT_EQ(f.pieces->spare_bytes(), 0u);
  auto again = f.pieces->get(2);  // after the drop: still read right
  EXPECT_TRUE(torch::equal(again, f.named[2].second.to(torch::kBFloat16)));
}

// With a read-ahead budget of every piece and the buffers kept between steps: every piece
// done leaves its buffer (pieces and spares within the budget), the drop before the step
// keeps them, and the next step's reads land in the same buffers, read right.
TEST(TierUnitPieces, KeptBetweenStepsWithinTheReadAheadBudget) {
  const int64_t all = 5 * kBlock;  // elements of the four units
  // Each buffer holds its piece's aligned blocks, up to two blocks more: room for those.
  const int64_t slack = 4 * kAlignment;  // elements: 8 blocks of bf16
  Fixture f(all + slack, /*keep_between_steps=*/true);
  const size_t budget = static_cast<size_t>(all + slack) * 2;
  // All four read ahead at once (as a step's read-ahead does), then done.
  for (size_t u = 0; u < 4; ++u) EXPECT_TRUE(f.pieces->prefetch(u));
  std::vector<const void*> buffers;
  for (size_t u = 0; u < 4; ++u) buffers.push_back(f.pieces->get(u).data_ptr());
  for (size_t u = 0; u < 4; ++u) {
    f.pieces->done(u);
    EXPECT_LE(f.pieces->spare_bytes() + f.pieces->resident_bytes(), budget);
  }
  const auto pieces_bytes = static_cast<size_t>(all) * 2;
  EXPECT_GE(f.pieces->spare_bytes(), pieces_bytes);  // all four kept, not two
  f.pieces->drop_spares();                           // the optimizer step: still kept
  EXPECT_GE(f.pieces->spare_bytes(), pieces_bytes);
  f.pieces->invalidate();
  const auto block_of = [](const void* p) { return reinterpret_cast<uintptr_t>(p) / kAlignment; };
  for (size_t u = 0; u < 4; ++u) EXPECT_TRUE(f.pieces->prefetch(u));
  for (size_t u = 0; u < 4; ++u) {
    auto piece = f.pieces->get(u);
    EXPECT_TRUE(torch::equal(piece, f.named[u].second.to(torch::kBFloat16))) << "unit " << u;
    bool reused = false;
    for (const void* b : buffers) reused = reused || block_of(b) == block_of(piece.data_ptr());
    EXPECT_TRUE(reused) << "unit " << u << " read into a new buffer";
    f.pieces->done(u);
  }
}

// A read that finds no spare of its size frees spares of other sizes first: the pieces in
// memory and the spares never exceed the budget.
TEST(TierUnitPieces, ANewReadBufferFreesSparesOfOtherSizesToStayInTheBudget) {
  // Read-ahead of two small pieces; the budget is then the two largest pieces' (the large
  // and a small one, each up to two blocks more).
  Fixture f(2 * kBlock, /*keep_between_steps=*/true);
  const size_t budget = static_cast<size_t>(3 * kBlock) * 2 + 4 * kAlignment;
  (void)f.pieces->get(3);
  f.pieces->done(3);
  EXPECT_GE(f.pieces->spare_bytes(), static_cast<size_t>(2 * kBlock) * 2);  // the large one kept
  for (size_t u = 0; u < 2; ++u) {
    EXPECT_TRUE(f.pieces->prefetch(u));
    EXPECT_LE(f.pieces->spare_bytes() + f.pieces->resident_bytes(), budget) << "unit " << u;
  }
  EXPECT_EQ(f.pieces->spare_bytes(), 0u);  // freed for the first small read
  for (size_t u = 0; u < 2; ++u) {
    EXPECT_TRUE(torch::equal(f.pieces->get(u), f.named[u].second.to(torch::kBFloat16)));
  }
}

// Without keep_between_steps the same budget is used within a step, and dropped before the
// optimizer step.
TEST(TierUnitPieces, DroppedBeforeTheStepUnlessKept) {
  Fixture f(5 * kBlock + 4 * kAlignment, /*keep_between_steps=*/false);
  for (size_t u = 0; u < 4; ++u) EXPECT_TRUE(f.pieces->prefetch(u));
  for (size_t u = 0; u < 4; ++u) f.pieces->done(u);
  EXPECT_GE(f.pieces->spare_bytes(), static_cast<size_t>(5 * kBlock) * 2);  // all four
  f.pieces->drop_spares();
  EXPECT_EQ(f.pieces->spare_bytes(), 0u);
}

}  // namespace
}  // namespace zoff::engine::tier_unit_pieces_test
