// The multi-layer perceptron.
#include "zoff/models/mlp.h"

#include "zoff/core/error.h"
#include "zoff/models/widened_products.h"
#include "zoff/unit/unit_call.h"

namespace zoff::models {

MlpImpl::MlpImpl(const MlpOptions& options) : options_(options) {
  const auto& o = options_;
  ZOFF_CHECK_ARG(o.in_dim() >= 1, "mlp: in_dim = ", o.in_dim(), ": must be >= 1");
  ZOFF_CHECK_ARG(o.out_dim() >= 1, "mlp: out_dim = ", o.out_dim(), ": must be >= 1");
  for (int64_t h : o.hidden()) {
    ZOFF_CHECK_ARG(h >= 1, "mlp: hidden width = ", h, ": must be >= 1");
  }
  ZOFF_CHECK_ARG(o.activation() == "gelu" || o.activation() == "relu", "mlp: activation = '",
                 o.activation(), "': must be gelu or relu");
  ZOFF_CHECK_ARG(o.dropout() >= 0.0 && o.dropout() < 1.0, "mlp: dropout = ", o.dropout(),
                 ": must be in [0, 1)");
  gelu_ = o.activation() == "gelu";
  layers = register_module("layers", torch::nn::ModuleList());
  int64_t width = o.in_dim();
  for (int64_t h : o.hidden()) {
    layers->push_back(torch::nn::Linear(width, h));
    width = h;
  }
  layers->push_back(torch::nn::Linear(width, o.out_dim()));
}

torch::Tensor MlpImpl::forward(torch::Tensor x) {
  const size_t last = layers->size() - 1;
  for (size_t i = 0; i < layers->size(); ++i) {
    auto* linear = layers[i]->as<torch::nn::LinearImpl>();
    // One stage-3 unit. fp16 (and bf16 without bf16 dot products): the product in fp32,
    // rounded once (widened_products.h).
    x = zoff::with_unit(*linear, [&] {
      return widens(x) ? widened_linear(x, linear->weight, linear->bias) : linear->forward(x);
    });
    if (i == last) break;
    x = gelu_ ? torch::gelu(x) : torch::relu(x);
    if (options_.dropout() > 0.0) x = torch::dropout(x, options_.dropout(), is_training());
  }
  return x;
}

}  // namespace zoff::models
