// The umbrella header compiles on its own and exposes every area (a regression test: the
// activation-checkpointing function once clashed with the zoff::checkpoint namespace).
#include <gtest/gtest.h>
#include <zoff/zoff.h>

namespace {

TEST(UmbrellaHeader, ExposesEveryArea) {
  EXPECT_EQ(zoff::checkpoint::kCheckpointFormatVersion, 2);
  torch::nn::Linear lin(2, 2);
  auto x = torch::randn({3, 2}, torch::requires_grad());
  auto y = zoff::activation_checkpoint([&](const torch::Tensor& h) { return lin(h); }, x);
  y.sum().backward();
  EXPECT_TRUE(lin->weight.grad().defined());
  EXPECT_TRUE(torch::equal(zoff::unit_forward(lin, x), lin(x)));
}

}  // namespace
