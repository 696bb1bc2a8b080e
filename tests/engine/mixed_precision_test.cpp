// Mixed precision (bf16, fp16 with loss scaling) and optimizer offload in the ZeroEngine.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <limits>

#include "engine_test_support.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine::mixed_precision_test {
namespace {

using testing::base_config;
using testing::global_batch;
using testing::make_model;

constexpr int64_t kGlobal = 12;
// bf16 keeps 8 bits of mantissa: after a few steps the loss may differ from fp32 by this.
constexpr double kBf16LossRelTol = 0.03;
// Accumulating 4 micro-batches vs one 4x batch: only fp32 summation order differs.
constexpr double kAccumRelTol = 1e-5;

struct RunResult {
  std::vector<double> losses;
  std::vector<StepStats> stats;
  torch::Tensor params;  // fp32 copy of the compute parameters after the run
};

// Trains `steps` steps of the tiny MLP on every rank; `poison(step, rank)` may return a
// factor to multiply that rank's loss by (inf to inject an overflow).
RunResult train(const config::Config& cfg, int world, int steps,
                const std::function<double(int, int)>& poison = nullptr) {
  std::vector<RunResult> results(static_cast<size_t>(world));
  std::vector<testing::TinyMlp> models;
  for (int r = 0; r < world; ++r) models.push_back(make_model(11));
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    ZeroEngine engine(model.ptr(), cfg, comm);
    auto& res = results[static_cast<size_t>(rank)];
    const int64_t micro = cfg.train_micro_batch_size_per_gpu;
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      double sum = 0;
      for (int64_t k = 0; k < cfg.gradient_accumulation_steps; ++k) {
        const int64_t start = (k * world + rank) * micro;
        auto out = model(x.narrow(0, start, micro).to(engine.compute_dtype()));
        auto loss = torch::mse_loss(out.to(torch::kFloat32), y.narrow(0, start, micro));
        const double factor = poison ? poison(s, rank) : 1.0;
        engine.backward(factor == 1.0 ? loss : loss * factor);
        sum += loss.item<double>();
      }
      auto mean = torch::tensor({sum / static_cast<double>(cfg.gradient_accumulation_steps)},
                                torch::kFloat64);
      comm->all_reduce_sum(mean)->wait();
      res.stats.push_back(engine.step());
      res.losses.push_back(mean.item<double>() / world);
    }
    std::vector<torch::Tensor> parts;
    for (auto& p : model->parameters())
      parts.push_back(p.detach().to(torch::kFloat32).reshape({-1}));
    res.params = torch::cat(parts);
  });
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(torch::equal(results[0].params, results[static_cast<size_t>(r)].params))
        << "rank " << r << " differs";
  }
  return results[0];
}

TEST(MixedPrecision, Bf16WithCpuOffloadTracksFp32) {
  for (int stage : {1, 2}) {
    auto cfg = base_config(stage, 2, kGlobal, 1);
    const auto fp32 = train(cfg, 2, 10);
    cfg.bf16 = true;
    cfg.zero.offload_optimizer.device = "cpu";
    const auto bf16 = train(cfg, 2, 10);
    for (size_t s = 0; s < fp32.losses.size(); ++s) {
      EXPECT_NEAR(bf16.losses[s], fp32.losses[s], kBf16LossRelTol * fp32.losses[s])
          << "stage " << stage << " step " << s;
    }
  }
}

TEST(MixedPrecision, OffloadPutsMasterStatesAndGradShardInTheOffloadTier) {
  const int world = 2;
  for (int stage : {1, 2}) {
    auto cfg = base_config(stage, world, kGlobal, 1);
    cfg.bf16 = true;
    cfg.zero.offload_optimizer.device = "cpu";
    std::vector<testing::TinyMlp> models{make_model(1), make_model(1)};
    testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
      ZeroEngine engine(models[static_cast<size_t>(rank)].ptr(), cfg, comm);
      const auto psi = static_cast<size_t>(engine.layout().padded_numel());
      const auto m = engine.memory();
      // Compute tier: 16-bit params, one copy per host (host_shared_params) of which this rank
      // counts its share (+ the full fp32 gradient buffer at stage 1: micro-batches
      // accumulate in fp32 at every stage); no master, no optimizer state.
      EXPECT_EQ(m.compute.params, 2 * psi / world);
      EXPECT_EQ(m.host_shared_params, 2 * psi);
      EXPECT_EQ(m.compute.grads, stage == 1 ? 4 * psi : 0u);
      EXPECT_EQ(m.compute.master, 0u);
      EXPECT_EQ(m.compute.optim, 0u);
      // Offload tier: fp32 master 4, m + v 8, fp32 grad shard 4 bytes per shard element
      // (stage 1 reduces into the start of its full buffer: the host is the compute device).
      EXPECT_EQ(m.offload.master, 4 * psi / world);
      EXPECT_EQ(m.offload.optim, 8 * psi / world);
      EXPECT_EQ(m.offload.grads, stage == 1 ? 0u : 4 * psi / world);
      EXPECT_EQ(engine.flat_params().scalar_type(), torch::kBFloat16);
    });
  }
}

// The fp16 tests use a model made of elementwise ops, whose fp16 arithmetic is one rounding
// per op (fp16 matrix products: widened_products_test, train_fp16_test): out = (x * w1 + b1) * w2.
struct ElementwiseImpl : torch::nn::Module {
  ElementwiseImpl() {
    w1 = register_parameter("w1", torch::randn({8}));
    b1 = register_parameter("b1", torch::randn({8}));
    w2 = register_parameter("w2", torch::randn({8}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return (x * w1 + b1) * w2; }
  torch::Tensor w1, b1, w2;
};
TORCH_MODULE(Elementwise);

TEST(MixedPrecision, Fp16OverflowSkipsTheStepOnEveryRankAndHalvesTheScale) {
  const int world = 2;
  auto cfg = base_config(2, world, kGlobal, 1);
  cfg.fp16.enabled = true;
  cfg.fp16.initial_scale_power = 10;
  cfg.fp16.hysteresis = 1;
  cfg.fp16.loss_scale_window = 1000;
  cfg.zero.offload_optimizer.device = "cpu";
  constexpr int kPoisonStep = 3;
  torch::manual_seed(5);
  Elementwise m0;
  torch::manual_seed(5);
  Elementwise m1;
  std::vector<Elementwise> models{m0, m1};
  std::vector<std::vector<StepStats>> stats(world);
  std::vector<torch::Tensor> before(world), after(world);
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    ZeroEngine engine(model.ptr(), cfg, comm);
    for (int s = 0; s < 6; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      const int64_t micro = cfg.train_micro_batch_size_per_gpu;
      auto out = model(x.narrow(0, rank * micro, micro).to(torch::kHalf));
      auto loss = out.to(torch::kFloat32).square().mean();
      // Only rank 1's gradient overflows at the poisoned step.
      if (s == kPoisonStep && rank == 1) loss = loss * std::numeric_limits<float>::infinity();
      engine.backward(loss);
      if (s == kPoisonStep) before[static_cast<size_t>(rank)] = engine.flat_params().clone();
      stats[static_cast<size_t>(rank)].push_back(engine.step());
      if (s == kPoisonStep) after[static_cast<size_t>(rank)] = engine.flat_params().clone();
    }
  });
  for (int r = 0; r < world; ++r) {
    const auto& st = stats[static_cast<size_t>(r)];
    for (int s = 0; s < 6; ++s) {
      EXPECT_EQ(st[static_cast<size_t>(s)].skipped, s == kPoisonStep)
          << "rank " << r << " step " << s;
    }
    EXPECT_DOUBLE_EQ(st[kPoisonStep].loss_scale, 1024.0);
    EXPECT_DOUBLE_EQ(st[kPoisonStep + 1].loss_scale, 512.0) << "scale must halve after overflow";
    EXPECT_TRUE(torch::equal(before[static_cast<size_t>(r)], after[static_cast<size_t>(r)]))
        << "a skipped step changed rank " << r << "'s parameters";
  }
}

TEST(MixedPrecision, Fp16OverflowAtMinimumScaleStopsWithADiagnosis) {
  auto cfg = base_config(1, 1, kGlobal, 1);
  cfg.fp16.enabled = true;
  cfg.fp16.initial_scale_power = 1;  // scale 2
  cfg.fp16.min_loss_scale = 1.0;
  cfg.fp16.hysteresis = 1;
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    Elementwise model;
    ZeroEngine engine(model.ptr(), cfg, comm);
    auto x = torch::randn({kGlobal, 8}).to(torch::kHalf);
    auto bad = model(x).to(torch::kFloat32).sum() * std::numeric_limits<float>::infinity();
    engine.backward(bad);
    EXPECT_TRUE(engine.step().skipped);  // 2 -> 1
    engine.backward(model(x).to(torch::kFloat32).sum() * std::numeric_limits<float>::infinity());
    try {
      engine.step();
      ADD_FAILURE() << "no error at the minimum scale";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("step 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("2 -> 1"), std::string::npos) << msg;  // the history
    }
  });
}

TEST(Offload, AccumulationOverFourMicroBatchesMatchesOneBigBatch) {
  for (int stage : {1, 2}) {
    for (int world : {1, 3}) {  // 12 samples = 4 micro-batches x world x micro
      auto big = base_config(stage, world, kGlobal, 1);
      big.zero.offload_optimizer.device = "cpu";
      auto acc = big;
      ASSERT_EQ(kGlobal % (4 * world), 0);
      acc.gradient_accumulation_steps = 4;
      acc.train_micro_batch_size_per_gpu = kGlobal / (4 * world);
      const auto a = train(acc, world, 8);
      const auto b = train(big, world, 8);
      auto plain = big;
      plain.zero.offload_optimizer.device = "none";
      const auto c = train(plain, world, 8);
      for (size_t s = 0; s < a.losses.size(); ++s) {
        EXPECT_NEAR(a.losses[s], b.losses[s], kAccumRelTol * b.losses[s]) << stage << "/" << world;
        EXPECT_NEAR(b.losses[s], c.losses[s], kAccumRelTol * c.losses[s]) << stage << "/" << world;
      }
      EXPECT_LT(testing::rel_diff(a.params, b.params), kAccumRelTol);
      EXPECT_TRUE(torch::equal(b.params, c.params)) << "offload changed the numbers";
    }
  }
}

TEST(Offload, NvmeWithoutAUsableDirectoryIsRefusedNamingIt) {
  auto cfg = base_config(2, 1, kGlobal, 1);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {"/proc/zoff-no-such-dir"};
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    auto model = make_model(5);
    try {
      ZeroEngine engine(model.ptr(), cfg, comm);
      ADD_FAILURE() << "no error";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("/proc/zoff-no-such-dir"), std::string::npos)
          << e.what();
    }
  });
}

// Gradients in the tier with clipping on: the norm is summed bucket by bucket as the
// gradients are written (another order than the in-memory sum), the clip factor applied
// as each sub-group is read. Same steps as in memory up to that rounding.
TEST(Offload, NvmeGradientsWithClippingTrackTheInMemoryRun) {
  constexpr double kNormRelTol = 1e-5;  // float sums of the same squares in another order
  const std::string dir = "/var/tmp/zoff_grads_clip_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (int world : {1, 3}) {
    auto cfg = base_config(2, world, kGlobal, 2);
    cfg.gradient_clipping = 0.05;  // below the tiny MLP's norms: every step clips
    cfg.zero.offload_optimizer.device = "nvme";
    cfg.zero.offload_optimizer.nvme_paths = {dir};
    cfg.zero.sub_group_size = 2048;
    cfg.zero.offload_optimizer.gradients = "cpu";
    const auto want = train(cfg, world, 6);
    cfg.zero.offload_optimizer.gradients = "nvme";
    const auto got = train(cfg, world, 6);
    for (size_t s = 0; s < want.stats.size(); ++s) {
      EXPECT_TRUE(want.stats[s].clipped) << "step " << s;
      EXPECT_EQ(got.stats[s].clipped, want.stats[s].clipped) << "step " << s;
      EXPECT_NEAR(got.stats[s].grad_norm, want.stats[s].grad_norm,
                  kNormRelTol * want.stats[s].grad_norm)
          << "world " << world << " step " << s;
      EXPECT_NEAR(got.losses[s], want.losses[s], kNormRelTol * want.losses[s]) << s;
    }
    EXPECT_LT(testing::rel_diff(got.params, want.params), kNormRelTol) << "world " << world;
  }
  std::filesystem::remove_all(dir);
}

TEST(Offload, NvmeGradientsWhereTheyCannotWorkAreRefusedNamingTheKey) {
  auto cfg = base_config(1, 1, kGlobal, 1);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {"/var/tmp"};
  cfg.zero.offload_optimizer.gradients = "nvme";
  auto fp16 = base_config(2, 1, kGlobal, 1);
  fp16.fp16.enabled = true;
  fp16.zero.offload_optimizer = cfg.zero.offload_optimizer;
  for (const auto& bad : {cfg, fp16}) {
    testing::run_ranks(1, [&](dist::CommPtr comm, int) {
      auto model = make_model(5);
      try {
        ZeroEngine engine(model.ptr(), bad, comm);
        ADD_FAILURE() << "stage " << bad.zero.stage << " fp16 " << bad.fp16.enabled << " accepted";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("offload_optimizer.gradients = nvme"),
                  std::string::npos)
            << e.what();
      }
    });
  }
}

TEST(Offload, NvmeWithTheTorchOptimizerBackendIsRefused) {
  auto cfg = base_config(2, 1, kGlobal, 1);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {"/var/tmp"};
  EngineOptions eo;
  eo.optimizer_backend = optim::OptimizerBackend::kTorch;
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    auto model = make_model(5);
    EXPECT_THROW(ZeroEngine(model.ptr(), cfg, comm, eo), UsageError);
  });
}
}  // namespace
}  // namespace zoff::engine::mixed_precision_test

namespace zoff::engine::mixed_precision_test {
namespace {

// Delayed parameter update: a regression on one fixed batch, so a converging run is
// visible in the loss. DPU uses parameters one step stale, so it converges a little
// slower than the plain run but must get close to it.
TEST(DelayedParamUpdate, ConvergesLikeThePlainOffloadRun) {
  constexpr int kSteps = 60;
  constexpr double kDpuLossSlack = 1.5;  // DPU final loss at most 1.5x the plain run's
  for (bool bf16 : {false, true}) {
    auto cfg = testing::base_config(2, 2, kGlobal, 1);
    cfg.zero.offload_optimizer.device = "cpu";
    cfg.bf16 = bf16;
    std::vector<double> final_loss;
    for (bool dpu : {false, true}) {
      cfg.zero.offload_optimizer.delayed_param_update = dpu;
      cfg.zero.offload_optimizer.dpu_warmup_steps = 5;
      std::vector<testing::TinyMlp> models{make_model(2), make_model(2)};
      std::vector<double> losses(kSteps);
      testing::run_ranks(2, [&](dist::CommPtr comm, int rank) {
        auto model = models[static_cast<size_t>(rank)];
        ZeroEngine engine(model.ptr(), cfg, comm);
        auto [x, y] = global_batch(0, kGlobal);
        const int64_t micro = cfg.train_micro_batch_size_per_gpu;
        for (int s = 0; s < kSteps; ++s) {
          auto out = model(x.narrow(0, rank * micro, micro).to(engine.compute_dtype()));
          auto loss = torch::mse_loss(out.to(torch::kFloat32), y.narrow(0, rank * micro, micro));
          engine.backward(loss);
          engine.step();
          auto l = torch::tensor({loss.item<double>()}, torch::kFloat64);
          comm->all_reduce_sum(l)->wait();
          if (rank == 0) losses[static_cast<size_t>(s)] = l.item<double>() / 2;
        }
        engine.synchronize();
      });
      EXPECT_LT(losses.back(), 0.5 * losses.front()) << "dpu " << dpu << " bf16 " << bf16;
      final_loss.push_back(losses.back());
    }
    std::printf("bf16 %d: final loss plain %.4f, delayed update %.4f\n", bf16, final_loss[0],
                final_loss[1]);
    EXPECT_LT(final_loss[1], kDpuLossSlack * final_loss[0]);
  }
}

}  // namespace
}  // namespace zoff::engine::mixed_precision_test
