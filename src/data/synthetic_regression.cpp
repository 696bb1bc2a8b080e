// The seeded teacher-MLP regression task: each sample generated from (seed, index) alone.
#include "zoff/data/synthetic_regression.h"

#include <cmath>

#include "zoff/core/error.h"
#include "zoff/data/splitmix64.h"

namespace zoff::data {

namespace {
// Stream ids: the teacher uses stream kTeacherStream of the seed, sample i stream i.
constexpr uint64_t kTeacherStream = ~uint64_t{0};
constexpr double kTeacherBiasStd = 0.1;  // b1, b2 ~ N(0, 0.01)

std::vector<double> normals(SplitMix64& rng, int64_t n, double stddev) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = rng.normal() * stddev;
  return v;
}
}  // namespace

SyntheticRegression::SyntheticRegression(const SyntheticRegressionOptions& options)
    : options_(options) {
  const auto& o = options_;
  ZOFF_CHECK_ARG(o.size >= 1, "synthetic regression: size = ", o.size, ": must be >= 1");
  ZOFF_CHECK_ARG(o.in_dim >= 1, "synthetic regression: in_dim = ", o.in_dim, ": must be >= 1");
  ZOFF_CHECK_ARG(o.out_dim >= 1, "synthetic regression: out_dim = ", o.out_dim, ": must be >= 1");
  ZOFF_CHECK_ARG(o.teacher_hidden >= 1, "synthetic regression: teacher_hidden = ", o.teacher_hidden,
                 ": must be >= 1");
  ZOFF_CHECK_ARG(o.noise_std >= 0.0 && std::isfinite(o.noise_std),
                 "synthetic regression: noise_std = ", o.noise_std, ": must be >= 0");
  SplitMix64 rng(SplitMix64::derive(o.seed, kTeacherStream));
  w1_ = normals(rng, o.teacher_hidden * o.in_dim, 1.0 / std::sqrt(double(o.in_dim)));
  b1_ = normals(rng, o.teacher_hidden, kTeacherBiasStd);
  w2_ = normals(rng, o.out_dim * o.teacher_hidden, 1.0 / std::sqrt(double(o.teacher_hidden)));
  b2_ = normals(rng, o.out_dim, kTeacherBiasStd);
}

void SyntheticRegression::sample(int64_t i, float* x, float* y) const {
  const auto& o = options_;
  SplitMix64 rng(SplitMix64::derive(o.seed, static_cast<uint64_t>(i)));
  std::vector<double> xd = normals(rng, o.in_dim, 1.0);
  std::vector<double> h(static_cast<size_t>(o.teacher_hidden));
  for (int64_t j = 0; j < o.teacher_hidden; ++j) {
    double acc = b1_[size_t(j)];
    for (int64_t k = 0; k < o.in_dim; ++k) acc += w1_[size_t(j * o.in_dim + k)] * xd[size_t(k)];
    h[size_t(j)] = std::tanh(acc);
  }
  for (int64_t j = 0; j < o.out_dim; ++j) {
    double acc = b2_[size_t(j)];
    for (int64_t k = 0; k < o.teacher_hidden; ++k) {
      acc += w2_[size_t(j * o.teacher_hidden + k)] * h[size_t(k)];
    }
    y[j] = static_cast<float>(acc + rng.normal() * o.noise_std);
  }
  for (int64_t k = 0; k < o.in_dim; ++k) x[k] = static_cast<float>(xd[size_t(k)]);
}

Batch SyntheticRegression::get(const std::vector<int64_t>& indices) const {
  const auto batch = static_cast<int64_t>(indices.size());
  torch::Tensor inputs = torch::empty({batch, options_.in_dim}, torch::kFloat32);
  torch::Tensor targets = torch::empty({batch, options_.out_dim}, torch::kFloat32);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = indices[size_t(b)];
    ZOFF_CHECK_ARG(i >= 0 && i < options_.size, "synthetic regression: sample index ", i,
                   " out of range [0, ", options_.size, ")");
    sample(i, inputs.data_ptr<float>() + b * options_.in_dim,
           targets.data_ptr<float>() + b * options_.out_dim);
  }
  return {inputs, targets};
}

}  // namespace zoff::data
