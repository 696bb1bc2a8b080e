// The Fashion-MNIST convolutional classifier.
#include "zoff/models/fashion_cnn.h"

#include "zoff/core/error.h"
#include "zoff/unit/unit_call.h"

namespace zoff::models {

namespace {
constexpr int64_t kImageSide = 28;                          // pixels
constexpr int64_t kPooledSide = kImageSide / 4;             // after two 2x2 max-pools
constexpr int64_t kPooledArea = kPooledSide * kPooledSide;  // 49 positions
}  // namespace

FashionCnnImpl::FashionCnnImpl(const FashionCnnOptions& options) : options_(options) {
  const auto& o = options_;
  for (auto [name, v] : {std::pair{"channels1", o.channels1()},
                         {"channels2", o.channels2()},
                         {"groups", o.groups()},
                         {"hidden", o.hidden()},
                         {"classes", o.classes()}}) {
    ZOFF_CHECK_ARG(v >= 1, "cnn: ", name, " = ", v, ": must be >= 1");
  }
  ZOFF_CHECK_ARG(o.channels1() % o.groups() == 0 && o.channels2() % o.groups() == 0,
                 "cnn: groups = ", o.groups(), " must divide channels1 = ", o.channels1(),
                 " and channels2 = ", o.channels2());
  ZOFF_CHECK_ARG(o.dropout() >= 0.0 && o.dropout() < 1.0, "cnn: dropout = ", o.dropout(),
                 ": must be in [0, 1)");
  using torch::nn::Conv2dOptions;
  conv1 =
      register_module("conv1", torch::nn::Conv2d(Conv2dOptions(1, o.channels1(), 3).padding(1)));
  norm1 = register_module("norm1", torch::nn::GroupNorm(o.groups(), o.channels1()));
  conv2 = register_module(
      "conv2", torch::nn::Conv2d(Conv2dOptions(o.channels1(), o.channels2(), 3).padding(1)));
  norm2 = register_module("norm2", torch::nn::GroupNorm(o.groups(), o.channels2()));
  fc1 = register_module("fc1", torch::nn::Linear(o.channels2() * kPooledArea, o.hidden()));
  fc2 = register_module("fc2", torch::nn::Linear(o.hidden(), o.classes()));
}

torch::Tensor FashionCnnImpl::forward(const torch::Tensor& x) {
  ZOFF_CHECK_ARG(
      x.dim() == 4 && x.size(1) == 1 && x.size(2) == kImageSide && x.size(3) == kImageSide,
      "cnn: input must be [B, 1, 28, 28], got ", x.sizes());
  // Each unit_forward marks a ZeRO stage-3 unit (a no-op without an engine).
  using zoff::unit_forward;
  torch::Tensor h = unit_forward(norm1, unit_forward(conv1, x));
  h = torch::max_pool2d(torch::relu(h), 2);  // [B, c1, 14, 14]
  h = torch::max_pool2d(torch::relu(unit_forward(norm2, unit_forward(conv2, h))),
                        2);                          // [B, c2, 7, 7]
  h = torch::relu(unit_forward(fc1, h.flatten(1)));  // [B, hidden]
  if (options_.dropout() > 0.0) h = torch::dropout(h, options_.dropout(), is_training());
  return unit_forward(fc2, h);
}

}  // namespace zoff::models
