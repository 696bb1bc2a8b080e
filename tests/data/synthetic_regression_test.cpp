// Tests of the seeded synthetic regression task: per-index determinism, seed dependence,
// sensible statistics, a learnable signal, and rejected bad options.
#include "zoff/data/synthetic_regression.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"

namespace zoff::data::synthetic_regression_test {
namespace {

TEST(SyntheticRegression, SampleDependsOnlyOnSeedAndIndex) {
  SyntheticRegressionOptions o;
  o.size = 1000;
  SyntheticRegression a(o), b(o);
  Batch batch = a.get({5, 999, 0, 5});
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{4, o.in_dim}));
  ASSERT_EQ(batch.targets.sizes(), (std::vector<int64_t>{4, o.out_dim}));
  Batch single = b.get({999});
  EXPECT_TRUE(torch::equal(batch.inputs[1], single.inputs[0]));  // bitwise
  EXPECT_TRUE(torch::equal(batch.targets[1], single.targets[0]));
  EXPECT_TRUE(torch::equal(batch.inputs[0], batch.inputs[3]));
  EXPECT_FALSE(torch::equal(batch.inputs[0], batch.inputs[2]));
  o.seed += 1;
  SyntheticRegression c(o);
  EXPECT_FALSE(torch::equal(c.get({5}).inputs, a.get({5}).inputs));
}

TEST(SyntheticRegression, InputsAreStandardNormalAndTargetsFollowTheTeacher) {
  SyntheticRegressionOptions o;
  o.size = 4096;
  std::vector<int64_t> all(4096);
  for (int64_t i = 0; i < 4096; ++i) all[size_t(i)] = i;
  Batch b = SyntheticRegression(o).get(all);
  EXPECT_NEAR(b.inputs.mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(b.inputs.std().item<double>(), 1.0, 0.02);
  // The teacher is a function of x: a least-squares fit on [x, tanh features] is not
  // needed; a linear fit (torch's own lstsq, an independent solver) must already explain
  // a good part of the variance, while a fit against shuffled targets explains ~nothing.
  torch::Tensor X = torch::cat({b.inputs, torch::ones({4096, 1})}, 1);
  auto r2 = [&](const torch::Tensor& Y) {
    torch::Tensor W = std::get<0>(torch::linalg_lstsq(X, Y));
    torch::Tensor resid = Y - X.matmul(W);
    return 1.0 - (resid.pow(2).sum() / (Y - Y.mean(0)).pow(2).sum()).item<double>();
  };
  EXPECT_GT(r2(b.targets), 0.3);
  EXPECT_LT(r2(b.targets.roll(1, 0)), 0.05);
}

TEST(SyntheticRegression, BadOptionsAndIndicesAreUsageErrors) {
  SyntheticRegressionOptions o;
  o.in_dim = 0;
  EXPECT_THROW(SyntheticRegression{o}, UsageError);
  o = {};
  o.noise_std = -1;
  EXPECT_THROW(SyntheticRegression{o}, UsageError);
  o = {};
  o.size = 10;
  SyntheticRegression ds(o);
  EXPECT_THROW(ds.get({10}), UsageError);
  EXPECT_THROW(ds.get({-1}), UsageError);
}

}  // namespace
}  // namespace zoff::data::synthetic_regression_test
