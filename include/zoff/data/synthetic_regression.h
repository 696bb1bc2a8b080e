// A regression task generated from a seed: random inputs and the outputs of a fixed random
// "teacher" MLP plus a little noise. Data for the `mlp` example model, no files needed.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "zoff/data/dataset.h"

namespace zoff::data {

struct SyntheticRegressionOptions {
  int64_t size = 65536;         // samples
  int64_t in_dim = 32;          // input features
  int64_t out_dim = 8;          // regression targets
  int64_t teacher_hidden = 64;  // width of the teacher's single tanh hidden layer
  double noise_std = 0.01;      // std of the Gaussian noise added to the teacher's output
  uint64_t seed = 1234;
};

// Sample i: inputs x ~ N(0, 1) [in_dim]; targets y = W2 tanh(W1 x + b1) + b2 + noise
// [out_dim], noise ~ N(0, noise_std^2). The teacher (W1 [hidden, in_dim], W2 [out_dim,
// hidden] ~ N(0, 1/fan_in), b1, b2 ~ N(0, 0.01)) is drawn from the seed alone; x and the
// noise of sample i from (seed, i) alone, computed in double on the CPU without BLAS.
// So any index can be fetched on its own and is bitwise identical whatever batch it is in.
// get() returns float32 inputs [B, in_dim] and targets [B, out_dim].
class SyntheticRegression : public Dataset {
 public:
  // All sizes >= 1 and noise_std >= 0, else zoff::UsageError naming the value.
  explicit SyntheticRegression(const SyntheticRegressionOptions& options);

  int64_t size() const override { return options_.size; }
  Batch get(const std::vector<int64_t>& indices) const override;
  const SyntheticRegressionOptions& options() const { return options_; }

 private:
  // Writes sample i's inputs and targets (float32) to x and y.
  void sample(int64_t i, float* x, float* y) const;

  SyntheticRegressionOptions options_;
  std::vector<double> w1_;  // [teacher_hidden, in_dim], row-major
  std::vector<double> b1_;  // [teacher_hidden]
  std::vector<double> w2_;  // [out_dim, teacher_hidden], row-major
  std::vector<double> b2_;  // [out_dim]
};

}  // namespace zoff::data
