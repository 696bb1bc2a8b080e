// Tests of the MLP: shapes and parameter count, numerics against a torch::nn::Sequential
// built from LibTorch's own modules, learning a regression, and rejected options.
#include "zoff/models/mlp.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"

namespace zoff::models::mlp_test {
namespace {

constexpr double kForwardTolerance = 1e-6;

TEST(Mlp, ShapeAndParamCount) {
  torch::manual_seed(0);
  Mlp mlp(MlpOptions(10, {32, 16}, 3));
  EXPECT_EQ(mlp->forward(torch::randn({5, 10})).sizes(), (std::vector<int64_t>{5, 3}));
  int64_t n = 0;
  for (const auto& p : mlp->parameters()) n += p.numel();
  EXPECT_EQ(n, 10 * 32 + 32 + 32 * 16 + 16 + 16 * 3 + 3);
  Mlp linear(MlpOptions(4, {}, 2));  // no hidden layer: one Linear
  EXPECT_EQ(linear->layers->size(), 1u);
}

TEST(Mlp, MatchesTorchSequentialWithTheSameWeights) {
  for (const std::string act : {"gelu", "relu"}) {
    torch::manual_seed(1);
    Mlp mlp(MlpOptions(6, {8, 8}, 2).activation(act));
    torch::nn::Sequential ref;
    for (size_t i = 0; i < mlp->layers->size(); ++i) {
      auto* src = mlp->layers[i]->as<torch::nn::LinearImpl>();
      torch::nn::Linear copy(src->options);
      torch::NoGradGuard no_grad;
      copy->weight.copy_(src->weight);
      copy->bias.copy_(src->bias);
      ref->push_back(copy);
      if (i + 1 < mlp->layers->size()) {
        if (act == "gelu")
          ref->push_back(torch::nn::GELU());
        else
          ref->push_back(torch::nn::ReLU());
      }
    }
    torch::Tensor x = torch::randn({7, 6});
    EXPECT_TRUE(torch::allclose(mlp->forward(x), ref->forward(x), 0.0, kForwardTolerance)) << act;
  }
}

TEST(Mlp, LearnsARegression) {
  torch::manual_seed(2);
  torch::Tensor x = torch::randn({256, 8});
  torch::Tensor y = torch::sin(x.matmul(torch::randn({8, 2})));
  Mlp mlp(MlpOptions(8, {64}, 2));
  torch::optim::Adam opt(mlp->parameters(), torch::optim::AdamOptions(1e-2));
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(mlp->forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;
}

TEST(Mlp, BadOptionsAreUsageErrors) {
  EXPECT_THROW(Mlp(MlpOptions(0, {4}, 1)), UsageError);
  EXPECT_THROW(Mlp(MlpOptions(3, {4, 0}, 1)), UsageError);
  EXPECT_THROW(Mlp(MlpOptions(3, {4}, 1).activation("tanh")), UsageError);
  EXPECT_THROW(Mlp(MlpOptions(3, {4}, 1).dropout(1.0)), UsageError);
}

}  // namespace
}  // namespace zoff::models::mlp_test
