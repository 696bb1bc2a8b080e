// A small convolutional classifier for 28x28 grey images (the `cnn` example model, trained
// on Fashion-MNIST). GroupNorm instead of BatchNorm: no running-statistics buffers, so
// data-parallel training is exactly a larger batch and the model state is parameters only.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace zoff::models {

struct FashionCnnOptions {
  TORCH_ARG(int64_t, channels1) = 32;  // output channels of the first conv block
  TORCH_ARG(int64_t, channels2) = 64;  // output channels of the second conv block
  TORCH_ARG(int64_t, groups) = 8;      // GroupNorm groups; must divide both channel counts
  TORCH_ARG(int64_t, hidden) = 128;    // width of the fully connected layer
  TORCH_ARG(int64_t, classes) = 10;
  TORCH_ARG(double, dropout) = 0.0;  // before the last layer; 0 keeps training exact
};

// x float [B, 1, 28, 28] -> logits [B, classes]:
//   conv3x3(1->c1) GN ReLU maxpool2 -> [B, c1, 14, 14]
//   conv3x3(c1->c2) GN ReLU maxpool2 -> [B, c2, 7, 7]
//   flatten -> Linear(c2*49 -> hidden) ReLU -> Linear(hidden -> classes)
// LibTorch's default initialization (seed it with torch::manual_seed).
class FashionCnnImpl : public torch::nn::Module {
 public:
  // Bad sizes are a zoff::UsageError naming them.
  explicit FashionCnnImpl(const FashionCnnOptions& options = {});
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  FashionCnnOptions options_;
};
TORCH_MODULE(FashionCnn);

}  // namespace zoff::models
