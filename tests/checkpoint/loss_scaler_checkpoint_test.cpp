// fp16 runs resume with the dynamic loss scaler where it was (scale, hysteresis, window).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/checkpoint.h"

namespace zoff::checkpoint::loss_scaler_checkpoint_test {
namespace {

// An elementwise model in fp16: one rounding per op, cheap to reason about.
struct ScaleModelImpl : torch::nn::Module {
  ScaleModelImpl() { w = register_parameter("w", torch::randn({16})); }
  torch::Tensor forward(const torch::Tensor& x) { return x * w; }
  torch::Tensor w;
};
TORCH_MODULE(ScaleModel);

TEST(Checkpoint, Fp16LossScalerStateSurvivesResume) {
  auto cfg = engine::testing::base_config(2, 1, 4, 1);
  cfg.fp16.enabled = true;
  cfg.fp16.initial_scale_power = 12;
  cfg.fp16.hysteresis = 2;
  cfg.fp16.loss_scale_window = 3;
  testing::ScratchDir dir;
  engine::LossScaler::State saved;
  engine::testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    torch::manual_seed(1);
    ScaleModel model;
    engine::ZeroEngine engine(model.ptr(), cfg, comm);
    auto x = torch::randn({4, 16}).to(torch::kHalf);
    // One overflow spends a hysteresis credit; two clean steps advance the window.
    engine.backward(model(x).to(torch::kFloat32).sum() * std::numeric_limits<float>::infinity());
    EXPECT_TRUE(engine.step().skipped);
    for (int i = 0; i < 2; ++i) {
      engine.backward(model(x).to(torch::kFloat32).square().mean());
      engine.step();
    }
    saved = engine.loss_scaler()->state();
    save_checkpoint(engine, dir.path(), testing::run_identity());
  });
  EXPECT_EQ(saved.hysteresis_left, 1);
  EXPECT_EQ(saved.clean_steps, 2);
  engine::testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    torch::manual_seed(2);
    ScaleModel model;
    engine::ZeroEngine engine(model.ptr(), cfg, comm);
    load_checkpoint(engine, dir.path(), testing::run_identity());
    const auto got = engine.loss_scaler()->state();
    EXPECT_DOUBLE_EQ(got.scale, saved.scale);
    EXPECT_EQ(got.hysteresis_left, saved.hysteresis_left);
    EXPECT_EQ(got.clean_steps, saved.clean_steps);
    EXPECT_EQ(engine.global_step(), 3);
    EXPECT_EQ(engine.applied_steps(), 2);
  });
}

}  // namespace
}  // namespace zoff::checkpoint::loss_scaler_checkpoint_test
