// ZeroEngine against plain LibTorch (model->parameters() + torch::optim::AdamW), stages 0-2.
#include "zoff/engine/zero_engine.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine_test_support.h"
#include "zoff/config/lr_schedule.h"
#include "zoff/core/error.h"
#include "zoff/dist/shm_comm.h"

namespace zoff::engine::zero_engine_test {
namespace {

using testing::base_config;
using testing::global_batch;
using testing::make_model;
using testing::rel_diff;

constexpr int kSteps = 12;
constexpr int64_t kGlobal = 12;  // divisible by accum * world for world 1, 2, 3
constexpr uint64_t kSeed = 7;

struct Trace {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  torch::Tensor final_params;  // flattened in module order
};

torch::Tensor flatten_params(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(parts);
}

// The engine's parameters in module order; at stage 3 read through a unit gather.
torch::Tensor whole_params(ZeroEngine& engine, torch::nn::Module& m) {
  torch::Tensor out;
  zoff::with_unit(m, [&] {
    out = flatten_params(m);
    return out;
  });
  return out;
}

// Plain LibTorch: the whole global batch at once, torch::optim::AdamW, clip_grad_norm_.
Trace run_reference(const config::Config& cfg) {
  auto model = make_model(kSeed);
  torch::optim::AdamW opt(
      model->parameters(),
      torch::optim::AdamWOptions(cfg.optimizer.lr).weight_decay(cfg.optimizer.weight_decay));
  Trace t;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = global_batch(s, kGlobal);
    opt.zero_grad();
    auto loss = torch::mse_loss(model(x), y);
    loss.backward();
    double norm = 0;
    for (auto& p : model->parameters()) norm += p.grad().square().sum().item<double>();
    t.grad_norms.push_back(std::sqrt(norm));
    if (cfg.gradient_clipping > 0) {
      torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.gradient_clipping);
    }
    const double lr = config::lr_at(cfg.scheduler, cfg.optimizer.lr, s);
    static_cast<torch::optim::AdamWOptions&>(opt.param_groups()[0].options()).lr(lr);
    opt.step();
    t.losses.push_back(loss.item<double>());
  }
  t.final_params = flatten_params(*model);
  return t;
}

Trace run_engine(const config::Config& cfg, int world, optim::OptimizerBackend backend,
                 bool plain = false, const dist::CommOptions& transport = {}) {
  std::vector<Trace> traces(static_cast<size_t>(world));
  std::vector<testing::TinyMlp> models;
  for (int r = 0; r < world; ++r) models.push_back(make_model(kSeed, plain));
  testing::run_ranks(
      world,
      [&](dist::CommPtr comm, int rank) {
        auto model = models[static_cast<size_t>(rank)];
        EngineOptions opts;
        opts.optimizer_backend = backend;
        ZeroEngine engine(model.ptr(), cfg, comm, opts);
        auto& trace = traces[static_cast<size_t>(rank)];
        const int64_t micro = cfg.train_micro_batch_size_per_gpu;
        for (int s = 0; s < kSteps; ++s) {
          auto [x, y] = global_batch(s, kGlobal);
          double loss_sum = 0;
          for (int64_t k = 0; k < cfg.gradient_accumulation_steps; ++k) {
            const int64_t start = (k * world + rank) * micro;
            auto loss =
                torch::mse_loss(model(x.narrow(0, start, micro)), y.narrow(0, start, micro));
            engine.backward(loss);
            loss_sum += loss.item<double>();
          }
          auto mean = torch::tensor(
              {loss_sum / static_cast<double>(cfg.gradient_accumulation_steps)}, torch::kFloat64);
          comm->all_reduce_sum(mean)->wait();
          auto stats = engine.step();
          trace.losses.push_back(mean.item<double>() / world);
          trace.grad_norms.push_back(stats.grad_norm);
        }
        engine.synchronize();
        trace.final_params = whole_params(engine, *model);
      },
      transport);
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(torch::equal(traces[0].final_params, traces[static_cast<size_t>(r)].final_params))
        << "rank " << r << " parameters differ from rank 0";
  }
  return traces[0];
}

void expect_matches(const Trace& got, const Trace& ref, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  double worst = 0;
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    const double rel = std::abs(got.losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, testing::kLossRelTol) << what << " step " << s;
    EXPECT_NEAR(got.grad_norms[s], ref.grad_norms[s], 1e-5 * ref.grad_norms[s]) << what;
  }
  const double pdiff = rel_diff(got.final_params, ref.final_params);
  EXPECT_LT(pdiff, testing::kParamRelTol) << what;
  std::printf("%s: worst loss rel diff %.3g, final param rel diff %.3g\n", what.c_str(), worst,
              pdiff);
}

class EngineMatchesLibTorch : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(EngineMatchesLibTorch, AdamWWithAccumulationClippingAndWarmup) {
  const auto [stage, world] = GetParam();
  auto cfg = base_config(stage, world, kGlobal, /*accum=*/2);
  cfg.gradient_clipping = 0.5;
  cfg.scheduler.type = "WarmupLR";
  cfg.scheduler.warmup_min_lr = 0.0;
  cfg.scheduler.warmup_max_lr = 1e-2;
  cfg.scheduler.warmup_num_steps = 5;
  cfg.scheduler.warmup_type = "linear";
  const auto ref = run_reference(cfg);
  for (auto backend : {optim::OptimizerBackend::kFused, optim::OptimizerBackend::kTorch}) {
    const auto got = run_engine(cfg, world, backend);
    expect_matches(got, ref,
                   "stage " + std::to_string(stage) + " world " + std::to_string(world) +
                       (backend == optim::OptimizerBackend::kFused ? " fused" : " torch"));
  }
}

// Stages 1-3 reduce gradients and gather parameters only by reduce-scatter and all-gather,
// whose sums both transports add in rank order: training over shared memory and over Gloo
// must agree bit for bit (3 ranks: uneven pieces; accumulation 2: the first micro-batch
// writes the shard, the second adds). Stage 0's all-reduce is Gloo's ring, another order.
TEST(ZeroEngine, SharedMemoryAndGlooTrainStages1To3BitForBitTheSame) {
  for (int stage : {1, 2, 3}) {
    auto cfg = base_config(stage, 3, kGlobal, /*accum=*/2);
    const auto over_shm = run_engine(cfg, 3, optim::OptimizerBackend::kFused, false,
                                     {dist::Transport::kShm, dist::ShmComm::kDefaultSlotBytes});
    const auto over_gloo = run_engine(cfg, 3, optim::OptimizerBackend::kFused, false,
                                      {dist::Transport::kGloo, dist::ShmComm::kDefaultSlotBytes});
    EXPECT_TRUE(torch::equal(over_shm.final_params, over_gloo.final_params)) << "stage " << stage;
    EXPECT_EQ(over_shm.grad_norms, over_gloo.grad_norms) << "stage " << stage;
  }
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, EngineMatchesLibTorch,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1, 2, 3)));

TEST(ZeroEngine, Stage3WithoutMarkedUnitsKeepsThemWholeAndStaysExact) {
  auto cfg = base_config(3, 2, kGlobal, /*accum=*/2);
  const auto ref = run_reference(cfg);
  expect_matches(run_engine(cfg, 2, optim::OptimizerBackend::kFused, /*plain=*/true), ref,
                 "stage 3 unmarked world 2");
}

TEST(ZeroEngine, Stage3ReleasesUnitsAfterUseAndBoundsTheLiveParameters) {
  const int world = 2;
  auto cfg = base_config(3, world, kGlobal, 1);
  // fc1 (117 elements, 118 padded) + fc2 (98) + fc3 (32): at most 120 live, plus one unit.
  cfg.zero.stage3_max_live_parameters = 120;
  std::vector<testing::TinyMlp> models{make_model(1), make_model(1)};
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    ZeroEngine engine(model.ptr(), cfg, comm);
    const auto* g = engine.gatherer();
    ASSERT_NE(g, nullptr);
    for (int s = 0; s < 3; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      engine.backward(torch::mse_loss(model(x.narrow(0, rank * 6, 6)), y.narrow(0, rank * 6, 6)));
      for (size_t u = 0; u < 3; ++u) {
        EXPECT_EQ(g->state(u), UnitGatherer::State::kReleased) << "unit " << u << " step " << s;
      }
      engine.step();
    }
    // Step 1 starts with every unit whole (recording); from then on the bound holds.
    EXPECT_EQ(engine.memory().live_unit_bytes, 0u);
    // Released: the parameter keeps its shape but holds no memory (read it through
    // zoff::with_unit); whole again inside a unit scope.
    EXPECT_EQ(model->fc1->weight.storage().nbytes(), 0u);
    zoff::with_unit(*model->fc1, [&] {
      EXPECT_GT(model->fc1->weight.storage().nbytes(), 0u);
      EXPECT_TRUE(std::isfinite(model->fc1->weight.sum().item<float>()));
      return torch::Tensor();
    });
  });
}

// A unit of 256 KiB or more is a mapping of its own; released, its buffer is kept for the
// next gather of a unit of that size (no fresh pages to fault in), and the spares are
// dropped once backward ends, before the optimizer step.
TEST(ZeroEngine, Stage3ReusesReleasedUnitBuffersAndDropsThemAfterBackward) {
  auto cfg = base_config(3, 1, kGlobal, 1);
  auto model = make_model(kSeed, /*plain=*/false, /*hidden=*/40000);  // fc1: 1.4 MB of fp32
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    ZeroEngine engine(model.ptr(), cfg, comm);
    const auto* g = engine.gatherer();
    ASSERT_NE(g, nullptr);
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      engine.backward(torch::mse_loss(model(x), y));
      EXPECT_EQ(g->spare_bytes(), 0u) << "step " << s;
      engine.step();
    }
    const void* first = nullptr;
    torch::Tensor seen;
    zoff::with_unit(*model->fc1, [&] {
      first = model->fc1->weight.data_ptr();
      seen = model->fc1->weight.clone();
      return torch::Tensor();
    });
    const size_t fc1_bytes = static_cast<size_t>(40000 * 8 + 40000) * sizeof(float);
    EXPECT_EQ(g->spare_bytes(), fc1_bytes);
    zoff::with_unit(*model->fc1, [&] {
      EXPECT_EQ(model->fc1->weight.data_ptr(), first) << "a fresh buffer, not the spare";
      EXPECT_TRUE(torch::equal(model->fc1->weight, seen));
      return torch::Tensor();
    });
    auto [x, y] = global_batch(2, kGlobal);
    engine.backward(torch::mse_loss(model(x), y));
    EXPECT_EQ(g->spare_bytes(), 0u);
  });
}

TEST(ZeroEngine, StepTimesCoverEachPhaseOfEveryStageAndResetEachStep) {
  for (int stage : {0, 1, 2, 3}) {
    const int world = 2;
    auto cfg = base_config(stage, world, kGlobal, /*accum=*/2);
    std::vector<testing::TinyMlp> models{make_model(1), make_model(1)};
    testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
      auto model = models[static_cast<size_t>(rank)];
      ZeroEngine engine(model.ptr(), cfg, comm);
      for (int s = 0; s < 2; ++s) {
        auto [x, y] = global_batch(s, kGlobal);
        for (int k = 0; k < 2; ++k) {
          const auto rows = x.narrow(0, (rank * 2 + k) * 3, 3);
          engine.backward(torch::mse_loss(model(rows), y.narrow(0, (rank * 2 + k) * 3, 3)));
        }
        const auto t = engine.step().times;
        SCOPED_TRACE("stage " + std::to_string(stage) + " step " + std::to_string(s));
        EXPECT_GT(t.backward_ms, 0.0);
        EXPECT_GT(t.optimizer_ms, 0.0);
        EXPECT_LE(t.backward_reduce_ms, t.backward_ms);
        EXPECT_LE(t.grad_norm_ms + t.optimizer_ms + t.allgather_ms, t.step_ms);
        if (stage == 1 || stage == 2) {  // all-gather the new parameters
          EXPECT_GT(t.allgather_ms, 0.0);
        }
      }
    });
  }
}

TEST(ZeroEngine, MemoryFollowsTheStageTable) {
  // fp32 table: stage 0: 4 + 4 + 8 psi; 1: 4 + 4 + 8 psi / N; 2: 4 + (4 + 8) psi / N;
  // 3: (4 + 4 + 8) psi / N. Stages 1 and 2 also hold an fp32 master shard (4 psi / N): the
  // optimizer updates one contiguous shard space, which the whole parameters are not.
  // With host_shared_params (ranks on one host) stages 1-2 hold one parameter copy per host,
  // of which each rank counts its share: 4 psi / N.
  for (int stage : {0, 1, 2, 3}) {
    for (bool shared : {true, false}) {
      const int world = 2;
      auto cfg = base_config(stage, world, kGlobal, 1);
      cfg.zero.host_shared_params = shared;
      const bool one_copy = shared && (stage == 1 || stage == 2);
      std::vector<testing::TinyMlp> models{make_model(1), make_model(1)};
      testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
        auto model = models[static_cast<size_t>(rank)];
        ZeroEngine engine(model.ptr(), cfg, comm);
        const auto padded = static_cast<size_t>(engine.layout().padded_numel());
        auto [x, y] = global_batch(0, kGlobal);
        engine.backward(torch::mse_loss(model(x), y));
        engine.step();
        const auto m = engine.memory();
        EXPECT_EQ(m.params(), stage == 3 || one_copy ? 4 * padded / world : 4 * padded)
            << "stage " << stage;
        EXPECT_EQ(m.host_shared_params, one_copy ? 4 * padded : 0u) << "stage " << stage;
        EXPECT_EQ(m.grads(), stage >= 2 ? 4 * padded / world : 4 * padded) << "stage " << stage;
        const size_t states = stage == 0 ? 8 * padded : 8 * padded / world;
        const size_t master = stage == 1 || stage == 2 ? 4 * padded / world : 0;
        EXPECT_EQ(m.optim(), states + master) << "stage " << stage;
      });
    }
  }
}

TEST(ZeroEngine, Stage3LivePeakStaysWithinTheCapPlusOneUnit) {
  const int world = 2;
  auto cfg = base_config(3, world, kGlobal, 1);
  cfg.zero.stage3_max_live_parameters = 120;  // units: fc1 118, fc2 98, fc3 32 (padded)
  std::vector<testing::TinyMlp> models{make_model(1), make_model(1)};
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    ZeroEngine engine(model.ptr(), cfg, comm);
    for (int s = 0; s < 4; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      engine.backward(torch::mse_loss(model(x.narrow(0, rank * 6, 6)), y.narrow(0, rank * 6, 6)));
      engine.step();
    }
    const auto m = engine.memory();
    EXPECT_GT(m.peak_live_bytes, 0u);
    EXPECT_LE(m.peak_live_bytes, (120 + 118) * sizeof(float));
  });
}

TEST(ZeroEngine, RejectsMisuse) {
  auto cfg = base_config(1, 1, 4, 2);
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    auto model = make_model(3);
    ZeroEngine engine(model.ptr(), cfg, comm);
    EXPECT_THROW(engine.step(), Error);  // no backward yet
    auto x = torch::randn({2, 8});
    EXPECT_THROW(engine.backward(model(x).sum(0)), UsageError);  // not a scalar
    engine.backward(model(x).sum());
    engine.backward(model(x).sum());
    EXPECT_THROW(engine.backward(model(x).sum()), Error);  // accumulation overrun
  });
  auto bad = base_config(5, 1, 4, 1);
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    auto model = make_model(3);
    EXPECT_THROW(ZeroEngine(model.ptr(), bad, comm), UsageError);
  });
}

}  // namespace
}  // namespace zoff::engine::zero_engine_test
