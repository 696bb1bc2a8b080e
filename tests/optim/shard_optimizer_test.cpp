// ShardOptimizer (fused on every SIMD target, and the torch backend) against LibTorch's own
// optimizers; resume through state_buffers(); bad input.
#include "zoff/optim/shard_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>

#include "optim_test_support.h"
#include "zoff/core/error.h"
#include "zoff/optim/kernels.h"

namespace zoff::optim::shard_optimizer_test {
namespace {

using testing::for_each_simd_level;
using testing::kLengths;
using testing::kSteps;
using testing::OffsetSpan;
using testing::randn;

struct Case {
  std::string label;
  OptimizerOptions options;
};

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const char* type : {"adamw", "adam"}) {
    for (double wd : {0.0, 0.1}) {
      OptimizerOptions o;
      o.type = type;
      o.lr = 1e-2;
      o.beta1 = 0.85;
      o.beta2 = 0.99;
      o.weight_decay = wd;
      all.push_back({std::string(type) + (wd > 0 ? "_wd" : ""), o});
    }
  }
  OptimizerOptions sgd;
  sgd.type = "sgd";
  sgd.lr = 0.05;
  all.push_back({"sgd", sgd});
  sgd.momentum = 0.9;
  sgd.dampening = 0.2;
  sgd.weight_decay = 0.01;
  all.push_back({"sgd_momentum_dampening_wd", sgd});
  sgd.dampening = 0.0;
  sgd.nesterov = true;
  sgd.weight_decay = 0.0;
  all.push_back({"sgd_nesterov", sgd});
  OptimizerOptions adagrad;
  adagrad.type = "adagrad";
  adagrad.lr = 0.01;
  all.push_back({"adagrad", adagrad});
  adagrad.lr_decay = 0.05;
  adagrad.weight_decay = 0.1;
  adagrad.initial_accumulator_value = 0.2;
  adagrad.eps = 1e-10;
  all.push_back({"adagrad_all_options", adagrad});
  return all;
}

double lr_at(const OptimizerOptions& o, int step) { return o.lr * (1.0 - 0.05 * step); }

// LibTorch's optimizer for `o`, built the ordinary way (as a user would), on `param`.
std::unique_ptr<torch::optim::Optimizer> torch_optimizer(const OptimizerOptions& o,
                                                         torch::Tensor param) {
  std::vector<torch::Tensor> params{param};
  if (o.type == "adamw") {
    return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(o.lr)
                                                             .betas({o.beta1, o.beta2})
                                                             .eps(o.eps)
                                                             .weight_decay(o.weight_decay));
  }
  if (o.type == "adam") {
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(o.lr)
                                                            .betas({o.beta1, o.beta2})
                                                            .eps(o.eps)
                                                            .weight_decay(o.weight_decay));
  }
  if (o.type == "sgd") {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                           .momentum(o.momentum)
                                                           .dampening(o.dampening)
                                                           .weight_decay(o.weight_decay)
                                                           .nesterov(o.nesterov));
  }
  return std::make_unique<torch::optim::Adagrad>(
      params, torch::optim::AdagradOptions(o.lr)
                  .lr_decay(o.lr_decay)
                  .weight_decay(o.weight_decay)
                  .initial_accumulator_value(o.initial_accumulator_value)
                  .eps(o.eps));
}

// kSteps of LibTorch's own optimizer; returns the final params.
std::vector<float> torch_run(const OptimizerOptions& o, const std::vector<float>& p0,
                             const std::vector<std::vector<float>>& grads) {
  const auto n = static_cast<int64_t>(p0.size());
  auto param = torch::from_blob(const_cast<float*>(p0.data()), {n}).clone();
  auto opt = torch_optimizer(o, param);
  for (int s = 1; s <= kSteps; ++s) {
    param.mutable_grad() = torch::from_blob(const_cast<float*>(grads[s - 1].data()), {n}).clone();
    opt->param_groups()[0].options().set_lr(lr_at(o, s));
    opt->step();
  }
  return std::vector<float>(param.data_ptr<float>(), param.data_ptr<float>() + n);
}

void zoff_run(ShardOptimizer& opt, const OptimizerOptions& o, float* p,
              const std::vector<std::vector<float>>& grads, int first, int last,
              CopyOut copy_out = CopyOut::kNone, uint16_t* out16 = nullptr) {
  for (int s = first; s <= last; ++s) {
    opt.step(p, grads[static_cast<size_t>(s - 1)].data(), lr_at(o, s), copy_out, out16);
  }
}

std::vector<std::vector<float>> make_grads(size_t n, uint64_t seed) {
  std::vector<std::vector<float>> grads;
  for (int s = 0; s < kSteps; ++s) grads.push_back(randn(n, seed + s, 0.2f));
  return grads;
}

TEST(ShardOptimizer, FusedMatchesLibTorchOnEveryTarget) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.label);
    for (size_t n : kLengths) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const auto p0 = randn(n, 3);
      const auto grads = make_grads(n, 50);
      const auto want = torch_run(c.options, p0, grads);
      for_each_simd_level([&](SimdLevel) {
        const size_t offset = 1 + n % 3;  // 1..3 floats past a cache line
        OffsetSpan p(n, offset);
        p.assign(p0);
        auto opt = make_shard_optimizer(c.options, n, OptimizerBackend::kFused, 2);
        zoff_run(*opt, c.options, p.data(), grads, 1, kSteps);
        EXPECT_EQ(opt->step_count(), kSteps);
        EXPECT_WITHIN_TOLERANCE(p.data(), want.data(), n, "fused vs torch::optim");
        if (n == kLengths.back()) {
          const auto d = testing::relative_difference(p.data(), want.data(), n);
          std::printf("  %-26s n=%zu %-6s worst rel %.3g, norm rel %.3g (tolerance %.0e)\n",
                      c.label.c_str(), n, active_simd_target().c_str(), d.worst, d.norm_relative,
                      testing::kRelTol);
        }
      });
    }
  }
}

// The torch backend is LibTorch itself: bit-identical to using torch::optim directly.
TEST(ShardOptimizer, TorchBackendIsLibTorch) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.label);
    const size_t n = 1023;
    const auto p0 = randn(n, 4);
    const auto grads = make_grads(n, 60);
    const auto want = torch_run(c.options, p0, grads);
    OffsetSpan p(n, 2);
    p.assign(p0);
    auto opt = make_shard_optimizer(c.options, n, OptimizerBackend::kTorch, 1);
    zoff_run(*opt, c.options, p.data(), grads, 1, kSteps);
    EXPECT_EQ(0, std::memcmp(p.data(), want.data(), n * sizeof(float)));
  }
}

TEST(ShardOptimizer, CopyOutOfBothBackendsIsTheConvertedParams) {
  const size_t n = 4097;
  for (auto backend : {OptimizerBackend::kFused, OptimizerBackend::kTorch}) {
    for (CopyOut format : {CopyOut::kBf16, CopyOut::kFp16}) {
      OptimizerOptions o;
      auto opt = make_shard_optimizer(o, n, backend, 2);
      auto p = randn(n, 9);
      const auto grads = make_grads(n, 70);
      std::vector<uint16_t> out(n);
      zoff_run(*opt, o, p.data(), grads, 1, 3, format, out.data());
      auto want = torch::from_blob(p.data(), {static_cast<int64_t>(n)})
                      .to(format == CopyOut::kBf16 ? torch::kBFloat16 : torch::kHalf);
      EXPECT_EQ(0, std::memcmp(out.data(), want.data_ptr(), n * 2));
    }
  }
}

// Threads only split the span: any thread count gives bit-identical results.
TEST(ShardOptimizer, ThreadCountDoesNotChangeResults) {
  const size_t n = 300007;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.label);
    const auto p0 = randn(n, 5);
    const auto grads = make_grads(n, 80);
    std::vector<float> reference;
    for (int threads : {1, 2, 3}) {
      OffsetSpan p(n, 3);
      p.assign(p0);
      auto opt = make_shard_optimizer(c.options, n, OptimizerBackend::kFused, threads);
      zoff_run(*opt, c.options, p.data(), grads, 1, 4);
      if (reference.empty()) {
        reference = p.vec();
      } else {
        EXPECT_EQ(0, std::memcmp(p.data(), reference.data(), n * sizeof(float)))
            << threads << " threads";
      }
    }
  }
}

// A checkpoint is the params, state_buffers() and step_count(): restoring them into a new
// optimizer continues exactly as if there had been no interruption.
TEST(ShardOptimizer, ResumeThroughStateBuffersIsExact) {
  const size_t n = 2051;
  for (auto backend : {OptimizerBackend::kFused, OptimizerBackend::kTorch}) {
    for (const auto& c : cases()) {
      SCOPED_TRACE(c.label + (backend == OptimizerBackend::kTorch ? " torch" : " fused"));
      const auto p0 = randn(n, 6);
      const auto grads = make_grads(n, 90);
      auto whole = p0;
      auto straight = make_shard_optimizer(c.options, n, backend, 2);
      zoff_run(*straight, c.options, whole.data(), grads, 1, kSteps);

      auto resumed_params = p0;
      auto first = make_shard_optimizer(c.options, n, backend, 2);
      zoff_run(*first, c.options, resumed_params.data(), grads, 1, 5);
      std::map<std::string, std::vector<float>> saved;
      for (auto& [name, ptr] : first->state_buffers()) saved[name].assign(ptr, ptr + n);
      EXPECT_EQ(first->state_bytes(), saved.size() * n * sizeof(float));
      const int64_t step = first->step_count();
      first.reset();

      auto second = make_shard_optimizer(c.options, n, backend, 2);
      second->set_step_count(step);
      auto buffers = second->state_buffers();
      ASSERT_EQ(buffers.size(), saved.size());
      for (auto& [name, ptr] : buffers) {
        ASSERT_TRUE(saved.count(name)) << name;
        std::copy(saved[name].begin(), saved[name].end(), ptr);
      }
      zoff_run(*second, c.options, resumed_params.data(), grads, 6, kSteps);
      EXPECT_EQ(second->state_buffers(), buffers) << "state moved during steps";
      EXPECT_EQ(0, std::memcmp(resumed_params.data(), whole.data(), n * sizeof(float)));
    }
  }
}

TEST(ShardOptimizer, StateBufferNames) {
  auto names = [](const std::string& type, double momentum) {
    OptimizerOptions o;
    o.type = type;
    o.momentum = momentum;
    std::vector<std::string> out;
    for (auto backend : {OptimizerBackend::kFused, OptimizerBackend::kTorch}) {
      auto opt = make_shard_optimizer(o, 10, backend, 1);
      std::string joined;
      for (auto& [name, ptr] : opt->state_buffers()) joined += name + ",";
      out.push_back(joined);
    }
    EXPECT_EQ(out[0], out[1]) << type;
    return out[0];
  };
  EXPECT_EQ(names("adamw", 0), "exp_avg,exp_avg_sq,");
  EXPECT_EQ(names("adam", 0), "exp_avg,exp_avg_sq,");
  EXPECT_EQ(names("sgd", 0.9), "momentum_buffer,");
  EXPECT_EQ(names("sgd", 0.0), "");
  EXPECT_EQ(names("adagrad", 0), "sum,");
}

// Each bad hyper-parameter is refused with zoff::UsageError naming its key.
TEST(ShardOptimizer, BadOptionsNameTheKey) {
  auto expect_usage_error = [](OptimizerOptions o, const std::string& key, int threads = 1) {
    for (auto backend : {OptimizerBackend::kFused, OptimizerBackend::kTorch}) {
      try {
        make_shard_optimizer(o, 16, backend, threads);
        ADD_FAILURE() << "no error for bad " << key;
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      }
    }
  };
  OptimizerOptions o;
  o.type = "lamb";
  expect_usage_error(o, "type");
  o = {};
  o.lr = -1e-3;
  expect_usage_error(o, "lr");
  o = {};
  o.lr = std::nan("");
  expect_usage_error(o, "lr");
  o = {};
  o.beta1 = 1.0;
  expect_usage_error(o, "beta1");
  o = {};
  o.beta2 = -0.1;
  expect_usage_error(o, "beta2");
  o = {};
  o.eps = 0.0;
  expect_usage_error(o, "eps");
  o = {};
  o.weight_decay = -0.1;
  expect_usage_error(o, "weight_decay");
  o = {};
  o.type = "sgd";
  o.momentum = -0.5;
  expect_usage_error(o, "momentum");
  o.momentum = 0.9;
  o.dampening = 1.5;
  expect_usage_error(o, "dampening");
  o.dampening = 0.1;
  o.nesterov = true;
  expect_usage_error(o, "nesterov");
  o = {};
  o.type = "adagrad";
  o.lr_decay = -1;
  expect_usage_error(o, "lr_decay");
  o.lr_decay = 0;
  o.initial_accumulator_value = -1;
  expect_usage_error(o, "initial_accumulator_value");
  o = {};
  expect_usage_error(o, "threads", 0);
}

TEST(ShardOptimizer, BadStepArgumentsAreUsageErrors) {
  for (auto backend : {OptimizerBackend::kFused, OptimizerBackend::kTorch}) {
    OptimizerOptions o;
    auto opt = make_shard_optimizer(o, 4, backend, 1);
    std::vector<float> p(4, 1.0f), g(4, 0.5f);
    EXPECT_THROW(opt->step(p.data(), g.data(), -1.0, CopyOut::kNone, nullptr), UsageError);
    EXPECT_THROW(opt->step(p.data(), g.data(), INFINITY, CopyOut::kNone, nullptr), UsageError);
    EXPECT_THROW(opt->step(nullptr, g.data(), 1e-3, CopyOut::kNone, nullptr), UsageError);
    EXPECT_THROW(opt->step(p.data(), nullptr, 1e-3, CopyOut::kNone, nullptr), UsageError);
    EXPECT_THROW(opt->step(p.data(), g.data(), 1e-3, CopyOut::kBf16, nullptr), UsageError);
    EXPECT_THROW(opt->set_step_count(-1), UsageError);
    EXPECT_EQ(opt->step_count(), 0);  // nothing happened
    EXPECT_EQ(p[0], 1.0f);
  }
}

TEST(ShardOptimizer, EmptyShardSteps) {
  for (auto backend : {OptimizerBackend::kFused, OptimizerBackend::kTorch}) {
    OptimizerOptions o;
    auto opt = make_shard_optimizer(o, 0, backend, 2);
    opt->step(nullptr, nullptr, 1e-3, CopyOut::kBf16, nullptr);
    EXPECT_EQ(opt->step_count(), 1);
    EXPECT_EQ(opt->state_bytes(), 0u);
  }
}

}  // namespace
}  // namespace zoff::optim::shard_optimizer_test
