// make_tier_unit_pieces: stage-3 pieces written to a tier, read back on demand, and the read
// buffers of pieces done reused for the next reads (then dropped before the optimizer step).
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
  Fixture()
      : named(params()),
        layout(named, {{"a", {0}}, {"b", {1}}, {"c", {2}}, {"d", {3}}}, 1, true),
        tier(offload::make_nvme_tier(dir.path(), "pieces", {})),
        region(tier->allocate("params", layout.shard_size() * 2)),
        pieces(make_tier_unit_pieces(layout, *region, kAlignment, torch::kBFloat16,
                                     /*max_in_cpu=*/0)) {
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

}  // namespace
}  // namespace zoff::engine::tier_unit_pieces_test
