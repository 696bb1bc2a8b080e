// The activation bytes the engine logs: measured from the CPU allocator, and smaller with
// activation checkpointing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine_test_support.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/unit/activation_checkpoint.h"

namespace zoff::engine::activation_memory_test {
namespace {

constexpr int64_t kBatch = 64, kWidth = 256, kDepth = 6;

// kDepth residual blocks of Linear -> GELU -> Linear, each a unit, optionally checkpointed.
struct DeepImpl : torch::nn::Module {
  explicit DeepImpl(bool checkpointed) : checkpointed_(checkpointed) {
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < kDepth; ++i) {
      blocks->push_back(torch::nn::Sequential(torch::nn::Linear(kWidth, 4 * kWidth),
                                              torch::nn::GELU(),
                                              torch::nn::Linear(4 * kWidth, kWidth)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : *blocks) {
      auto block = std::dynamic_pointer_cast<torch::nn::SequentialImpl>(b);
      auto run = [block](const torch::Tensor& h) {
        return h + zoff::with_unit(*block, [&] { return block->forward(h); });
      };
      x = checkpointed_ ? zoff::activation_checkpoint(run, x) : run(x);
    }
    return x;
  }
  torch::nn::ModuleList blocks{nullptr};
  bool checkpointed_;
};
TORCH_MODULE(Deep);

size_t activations(bool checkpointed, int stage) {
  torch::manual_seed(1);
  Deep model(checkpointed);
  size_t kept = 0;
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    ZeroEngine engine(model.ptr(), testing::base_config(stage, 1, kBatch, 1), comm);
    for (int s = 0; s < 2; ++s) {
      auto x = torch::randn({kBatch, kWidth}, torch::requires_grad());
      engine.backward(model(x).square().mean());
      engine.step();
    }
    kept = engine.memory().activations;
  });
  return kept;
}

TEST(ActivationMemory, CheckpointingKeepsLessThanAQuarter) {
  for (int stage : {2, 3}) {
    const size_t plain = activations(false, stage);
    const size_t ckpt = activations(true, stage);
    // Without: per block the input, the [B, 4W] hidden twice (pre- and post-GELU) and the
    // output, ~(1 + 4 + 4 + 1) * B * W * 4 bytes; with: the block inputs only.
    const size_t per_block_floor = 9 * kBatch * kWidth * sizeof(float);
    EXPECT_GT(plain, kDepth * per_block_floor) << "stage " << stage;
    EXPECT_LT(ckpt * 4, plain) << "stage " << stage;
    std::printf("stage %d: activations kept %zu B plain, %zu B checkpointed\n", stage, plain, ckpt);
  }
}

}  // namespace
}  // namespace zoff::engine::activation_memory_test
