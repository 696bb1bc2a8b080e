// UnitGatherer's read-ahead order at stage 3: forward looks on into backward when gradients
// are on (the units backward needs first, the last kept whole), around to the next forward
// without them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zoff/dist/single_comm.h"
#include "zoff/engine/unit_gatherer.h"
#include "zoff/engine/unit_pieces.h"
#include "zoff/partition/model_layout.h"
#include "zoff/unit/activation_checkpoint.h"

namespace zoff::engine {
namespace {

constexpr size_t kUnits = 6;
constexpr int64_t kUnitElems = 1000;
constexpr size_t kPiecesAhead = 3;  // the pieces' read-ahead budget, in units

// Pieces in host memory that log which units were read ahead and which were asked for
// without having been read ahead, within a budget of kPiecesAhead units in memory.
class LoggingPieces final : public UnitPieces {
 public:
  LoggingPieces() : in_(kUnits, false) {
    for (size_t u = 0; u < kUnits; ++u) values_.push_back(torch::zeros({kUnitElems}));
  }
  torch::Tensor get(size_t u) override {
    if (!in_[u]) {
      asked_unread.push_back(u);
      bring_in(u);
    }
    return values_[u];
  }
  void done(size_t u) override {
    if (in_[u]) --resident_;
    in_[u] = false;
  }
  bool prefetch(size_t u) override {
    if (in_[u]) return true;
    if (resident_ >= kPiecesAhead) return false;
    read_ahead.push_back(u);
    bring_in(u);
    return true;
  }
  void invalidate() override {
    for (size_t u = 0; u < kUnits; ++u) done(u);
  }
  void fill(size_t u, const torch::Tensor& piece) override { values_[u].copy_(piece); }
  void finish_fill() override {}
  size_t resident_bytes() const override { return resident_; }
  size_t peak_resident_bytes() const override { return resident_; }

  std::vector<size_t> read_ahead;    // units whose pieces were read ahead, in order
  std::vector<size_t> asked_unread;  // units whose pieces were read when asked for

 private:
  void bring_in(size_t u) {
    in_[u] = true;
    ++resident_;
  }
  std::vector<bool> in_;
  std::vector<torch::Tensor> values_;
  size_t resident_ = 0;
};

bool has(const std::vector<size_t>& v, size_t u) {
  return std::find(v.begin(), v.end(), u) != v.end();
}

// Six units of kUnitElems run in order, one gathered ahead and three pieces read ahead.
class Lookahead : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    std::vector<partition::UnitSpec> specs;
    std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units;
    for (size_t u = 0; u < kUnits; ++u) {
      modules_.push_back(std::make_shared<torch::nn::Module>());
      named.emplace_back("w" + std::to_string(u), torch::zeros({kUnitElems}));
      specs.push_back({"unit" + std::to_string(u), {u}});
      module_units[modules_.back().get()] = {u};
    }
    layout_ = std::make_unique<partition::ModelLayout>(named, specs, 1, true);
    auto pieces = std::make_unique<LoggingPieces>();
    pieces_ = pieces.get();
    UnitGathererOptions options;
    options.prefetch_elems = kUnitElems;
    options.persistence_threshold = 1;
    gatherer_ =
        std::make_unique<UnitGatherer>(*layout_, module_units, std::move(pieces), torch::kFloat32,
                                       std::make_shared<dist::SingleComm>(), options);
    for (size_t u = 0; u < kUnits; ++u) {
      gatherer_->fill_unit(u, torch::full({layout_->units()[u].padded_numel}, 1.0f + u));
    }
    gatherer_->finish_fill();
    forward();  // the first step records the trace
    backward();
  }

  void forward() {
    for (const auto& m : modules_) {
      gatherer_->before_forward(*m);
      gatherer_->after_forward(*m);
    }
  }
  // The same, the units from `first` on each inside an activation checkpoint (which runs
  // them with grad mode off; gradients are on outside).
  void checkpointed_forward(size_t first) {
    const auto x = torch::ones({2}, torch::requires_grad());
    for (size_t u = 0; u < kUnits; ++u) {
      const auto run = [&, u](const torch::Tensor& in) {
        gatherer_->before_forward(*modules_[u]);
        gatherer_->after_forward(*modules_[u]);
        return in * 2;
      };
      if (u < first) {
        run(x);
      } else {
        activation_checkpoint(run, x);
      }
    }
  }
  void backward() {
    gatherer_->begin_backward();
    for (size_t u = kUnits; u-- > 0;) {
      gatherer_->before_backward(*modules_[u]);
      gatherer_->unit_backward_done(u);
    }
    gatherer_->end_backward();
  }
  void clear_logs() {
    pieces_->read_ahead.clear();
    pieces_->asked_unread.clear();
  }

  std::vector<std::shared_ptr<torch::nn::Module>> modules_;
  std::unique_ptr<partition::ModelLayout> layout_;
  LoggingPieces* pieces_ = nullptr;
  std::unique_ptr<UnitGatherer> gatherer_;
};

TEST_F(Lookahead, ForwardWithGradientsReadsAheadWhatBackwardNeedsFirst) {
  clear_logs();
  forward();
  // The next step's first units are not read ahead; backward's are.
  EXPECT_FALSE(has(pieces_->read_ahead, 0));
  EXPECT_FALSE(has(pieces_->read_ahead, 1));
  EXPECT_TRUE(has(pieces_->read_ahead, 3));
  // The last unit of forward, the first of backward, stays whole across the turn.
  EXPECT_EQ(gatherer_->state(kUnits - 1), UnitGatherer::State::kGathered);
  pieces_->asked_unread.clear();
  backward();
  // Backward asks for no piece that was not read ahead: 5 was never released, 4 and 3 were
  // gathered or read ahead.
  EXPECT_TRUE(pieces_->asked_unread.empty());
  for (size_t u = 0; u < kUnits; ++u) {
    EXPECT_EQ(gatherer_->state(u), UnitGatherer::State::kReleased) << "unit " << u;
  }
}

// A unit kept whole for a backward that does not come (forward twice) is used as it is.
TEST_F(Lookahead, KeptLastUnitServesTheNextForwardWhenNoBackwardCame) {
  forward();
  forward();
  EXPECT_EQ(gatherer_->state(kUnits - 1), UnitGatherer::State::kGathered);
  backward();
  EXPECT_EQ(gatherer_->state(kUnits - 1), UnitGatherer::State::kReleased);
}

// Checkpointed units run their forward with grad mode off, yet backward follows.
TEST_F(Lookahead, CheckpointedUnitsReadAheadWhatBackwardNeedsFirst) {
  clear_logs();
  checkpointed_forward(2);
  EXPECT_FALSE(has(pieces_->read_ahead, 0));
  EXPECT_FALSE(has(pieces_->read_ahead, 1));
  EXPECT_TRUE(has(pieces_->read_ahead, 3));
}

TEST_F(Lookahead, ForwardWithoutGradientsReadsAheadTheNextForward) {
  clear_logs();
  torch::NoGradGuard no_grad;
  forward();
  EXPECT_TRUE(has(pieces_->read_ahead, 0));
  // No backward follows: the last unit is released like the others.
  EXPECT_EQ(gatherer_->state(kUnits - 1), UnitGatherer::State::kReleased);
}

}  // namespace
}  // namespace zoff::engine
