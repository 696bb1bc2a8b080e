// A plain multi-layer perceptron: in_dim -> hidden... -> out_dim with GELU or ReLU between
// layers (the `mlp` example model, trained on SyntheticRegression).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zoff::models {

struct MlpOptions {
  MlpOptions(int64_t in_dim, std::vector<int64_t> hidden, int64_t out_dim)
      : in_dim_(in_dim), hidden_(std::move(hidden)), out_dim_(out_dim) {}
  TORCH_ARG(int64_t, in_dim);
  TORCH_ARG(std::vector<int64_t>, hidden);  // widths of the hidden layers, may be empty
  TORCH_ARG(int64_t, out_dim);
  TORCH_ARG(std::string, activation) = "gelu";  // "gelu" | "relu"
  TORCH_ARG(double, dropout) = 0.0;             // after each activation; 0 keeps training exact
};

// x [B, in_dim] -> [B, out_dim]. Linear layers keep LibTorch's default initialization
// (drawn from the global generator: seed it with torch::manual_seed).
class MlpImpl : public torch::nn::Module {
 public:
  // Sizes >= 1, a known activation and dropout in [0, 1), else zoff::UsageError.
  explicit MlpImpl(const MlpOptions& options);
  torch::Tensor forward(torch::Tensor x);

  const MlpOptions& options() const { return options_; }
  torch::nn::ModuleList layers{nullptr};  // the Linear layers, input to output

 private:
  MlpOptions options_;
  bool gelu_;
};
TORCH_MODULE(Mlp);

}  // namespace zoff::models
