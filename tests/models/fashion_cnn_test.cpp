// Tests of the Fashion-MNIST CNN: shapes, no buffers (GroupNorm, not BatchNorm), learning a
// small synthetic image task, and rejected options and inputs. (Accuracy on the real
// Fashion-MNIST needs the data area; it is measured end to end by the CLI's cnn example.)
#include "zoff/models/fashion_cnn.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"

namespace zoff::models::fashion_cnn_test {
namespace {

TEST(FashionCnn, ShapesAndNoBuffers) {
  torch::manual_seed(0);
  FashionCnn cnn;
  EXPECT_EQ(cnn->forward(torch::randn({3, 1, 28, 28})).sizes(), (std::vector<int64_t>{3, 10}));
  EXPECT_TRUE(cnn->buffers().empty());
  int64_t n = 0;
  for (const auto& p : cnn->parameters()) n += p.numel();
  // conv1 1*32*9+32, gn1 64, conv2 32*64*9+64, gn2 128, fc1 3136*128+128, fc2 128*10+10
  EXPECT_EQ(n, 320 + 64 + 18496 + 128 + 401536 + 1290);
}

// Ten classes, each a bright 6x6 square at its own position on a noisy background.
TEST(FashionCnn, LearnsASyntheticImageTask) {
  torch::manual_seed(1);
  const int64_t N = 200;
  torch::Tensor labels = torch::arange(N) % 10;
  torch::Tensor images = 0.3 * torch::randn({N, 1, 28, 28});
  for (int64_t i = 0; i < N; ++i) {
    const int64_t c = labels[i].item<int64_t>(), r = (c / 5) * 12 + 4, col = (c % 5) * 5;
    images.index_put_(
        {i, 0, torch::indexing::Slice(r, r + 6), torch::indexing::Slice(col, col + 6)}, 2.0);
  }
  FashionCnn cnn(FashionCnnOptions().channels1(8).channels2(16).groups(4).hidden(32));
  torch::optim::Adam opt(cnn->parameters(), torch::optim::AdamOptions(3e-3));
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(cnn->forward(images), labels).backward();
    opt.step();
  }
  const double accuracy =
      (cnn->forward(images).argmax(1) == labels).to(torch::kFloat64).mean().item<double>();
  EXPECT_GT(accuracy, 0.95);
}

TEST(FashionCnn, BadOptionsAndInputsAreUsageErrors) {
  EXPECT_THROW(FashionCnn(FashionCnnOptions().groups(5)), UsageError);
  EXPECT_THROW(FashionCnn(FashionCnnOptions().hidden(0)), UsageError);
  FashionCnn cnn;
  EXPECT_THROW(cnn->forward(torch::randn({2, 28, 28})), UsageError);
  EXPECT_THROW(cnn->forward(torch::randn({2, 3, 28, 28})), UsageError);
}

}  // namespace
}  // namespace zoff::models::fashion_cnn_test
