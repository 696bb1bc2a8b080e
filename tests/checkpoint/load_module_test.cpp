// load_module_from_checkpoint: a plain module gets the trained parameters of a sharded run.
#include "zoff/checkpoint/load_module.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/checkpoint_reader.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint::load_module_test {
namespace {

using testing::ScratchDir;
using testing::Segment;

TEST(LoadModule, FreshModuleGetsTheTrainedParameters) {
  ScratchDir dir;
  const auto run =
      testing::train_segment(testing::resume_config(1, 3), 3, Segment{0, 4, "", dir.path(), 4});
  auto fresh = engine::testing::make_model(12345);
  ASSERT_FALSE(torch::equal(testing::flatten_params(*fresh), run.params));
  const auto info = load_module_from_checkpoint(*fresh, dir.path());
  EXPECT_EQ(info.step, 4);
  EXPECT_TRUE(torch::equal(testing::flatten_params(*fresh), run.params));
  // The same module in bf16 gets the values rounded to bf16.
  auto half = engine::testing::make_model(1);
  half->to(torch::kBFloat16);
  load_module_from_checkpoint(*half, dir.path());
  EXPECT_TRUE(torch::equal(testing::flatten_params(*half), run.params.to(torch::kBFloat16)));
}

TEST(LoadModule, ReaderGathersRangesAcrossShardBoundaries) {
  ScratchDir dir;
  const auto run =
      testing::train_segment(testing::resume_config(2, 3), 3, Segment{0, 2, "", dir.path(), 2});
  CheckpointReader reader(dir.path());
  const auto& info = reader.info();
  // The whole flat buffer, element by element, from the module's parameters.
  auto flat = torch::zeros({info.padded_numel});
  for (const auto& item : run.modules[0]->named_parameters()) {
    const auto& s = reader.slot(item.key());
    flat.narrow(0, s.offset, s.numel).copy_(item.value().reshape({-1}));
  }
  auto got = torch::empty({info.padded_numel});
  reader.read_flat(0, info.padded_numel, got.data_ptr<float>());
  EXPECT_TRUE(torch::equal(got, flat));
  // A range straddling the rank 0 / rank 1 boundary.
  const int64_t b = info.shard_size();
  auto piece = torch::empty({6});
  reader.read_flat(b - 3, 6, piece.data_ptr<float>());
  EXPECT_TRUE(torch::equal(piece, flat.narrow(0, b - 3, 6)));
  EXPECT_THROW(reader.slot("fc9.weight"), UsageError);
}

TEST(LoadModule, MismatchedModuleIsRefusedAndUntouched) {
  ScratchDir dir;
  testing::train_segment(testing::resume_config(0, 1), 1, Segment{0, 1, "", dir.path(), 1});
  struct OtherImpl : torch::nn::Module {
    OtherImpl() {
      fc1 = register_module("fc1", torch::nn::Linear(8, 13));
      fc2 = register_module("fc2", torch::nn::Linear(13, 6));  // 7 in the checkpoint
      fc3 = register_module("fc3", torch::nn::Linear(6, 4));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  };
  OtherImpl other;
  const auto before = testing::flatten_params(other);
  try {
    load_module_from_checkpoint(other, dir.path());
    ADD_FAILURE() << "loaded into a module of another shape";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor fc2.weight: shape [6, 13]"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(torch::equal(before, testing::flatten_params(other)));

  struct SmallerImpl : torch::nn::Module {
    SmallerImpl() { fc1 = register_module("fc1", torch::nn::Linear(8, 13)); }
    torch::nn::Linear fc1{nullptr};
  };
  SmallerImpl smaller;
  EXPECT_THROW(load_module_from_checkpoint(smaller, dir.path()), UsageError);
}

}  // namespace
}  // namespace zoff::checkpoint::load_module_test
