// A model built without its parameter values (unit::defer_parameters) and valued unit by
// unit by the engine trains bit for bit as the same model built whole.
#include "zoff/unit/deferred_init.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <mutex>
#include <string>

#include "engine_test_support.h"
#include "user_model.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine::deferred_init_test {
namespace {

using testing::kVocab;
using testing::make_user_model;

constexpr int kSteps = 4;
constexpr int64_t kGlobal = 12;

struct TrainedRun {
  std::vector<double> losses;
  torch::Tensor params;
};

// The trainable values of a freshly built model, by name: what param_init hands out.
std::map<std::string, torch::Tensor> trainable_values(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (auto& item : m.named_parameters()) {
    if (item.value().requires_grad()) out[item.key()] = item.value().detach().clone();
  }
  return out;
}

// kSteps AdamW steps of the user model on this rank's slice of each global batch.
TrainedRun train(testing::UserModel model, const config::Config& cfg, dist::CommPtr comm,
                 EngineOptions options) {
  ZeroEngine engine(model.ptr(), cfg, comm, options);
  const int64_t micro = cfg.train_micro_batch_size_per_gpu;
  TrainedRun run;
  for (int s = 0; s < kSteps; ++s) {
    auto gen = torch::make_generator<torch::CPUGeneratorImpl>(700 + s);
    auto x = torch::randint(kVocab, {kGlobal}, gen), y = torch::randint(3, {kGlobal}, gen);
    const int64_t start = comm->rank() * micro;
    auto loss = torch::nn::functional::cross_entropy(
        model(x.narrow(0, start, micro)).to(torch::kFloat32), y.narrow(0, start, micro));
    engine.backward(loss);
    engine.step();
    run.losses.push_back(loss.item<double>());
  }
  run.params = engine.flat_params().to(torch::kFloat32).clone();
  return run;
}

class DeferredUserModel : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(DeferredUserModel, TrainsBitwiseAsTheEagerModel) {
  const auto [stage, world, bf16] = GetParam();
  auto cfg = testing::base_config(stage, world, kGlobal, /*accum=*/1);
  cfg.bf16 = bf16;
  if (bf16) cfg.zero.offload_optimizer.device = stage >= 1 ? "cpu" : "none";
  // Ranks are threads sharing LibTorch's global generator: build one model at a time so
  // every model here starts from the same seeded values.
  std::mutex build;
  auto build_model = [&build] {
    std::lock_guard<std::mutex> lock(build);
    return make_user_model();
  };
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    const TrainedRun eager = train(build_model(), cfg, comm, {});
    auto model = build_model();
    const auto values = trainable_values(*model);
    unit::defer_parameters(*model);
    ASSERT_TRUE(unit::is_deferred(model->a->weight));
    ASSERT_FALSE(unit::is_deferred(model->emb->weight)) << "frozen: keeps its values";
    EngineOptions options;
    options.param_init = [&values](const std::string& name, torch::Tensor v) {
      v.copy_(values.at(name));
    };
    const TrainedRun deferred = train(model, cfg, comm, options);
    EXPECT_EQ(deferred.losses, eager.losses) << "rank " << rank;
    EXPECT_TRUE(torch::equal(deferred.params, eager.params)) << "rank " << rank;
  });
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsPrecisions, DeferredUserModel,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 3),
                                            ::testing::Bool()));

TEST(DeferredInit, PlaceholdersKeepShapeAndDropMemory) {
  torch::nn::Linear linear(1000, 500);
  unit::defer_parameters(*linear);
  EXPECT_EQ(linear->weight.sizes(), torch::IntArrayRef({500, 1000}));
  EXPECT_TRUE(linear->weight.requires_grad());
  EXPECT_TRUE(unit::is_deferred(linear->weight));
  EXPECT_LE(linear->weight.storage().nbytes(), sizeof(float));
  EXPECT_FALSE(unit::is_deferred(torch::zeros({3, 4})));
  EXPECT_FALSE(unit::is_deferred(torch::zeros({1})));
}

TEST(DeferredInit, WithoutParamInitTheEngineNamesTheParameter) {
  testing::run_ranks(1, [](dist::CommPtr comm, int) {
    auto model = make_user_model();
    unit::defer_parameters(*model);
    try {
      ZeroEngine engine(model.ptr(), testing::base_config(3, 1, kGlobal, 1), comm);
      ADD_FAILURE() << "a deferred model without param_init was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("parameter a.weight has no values"), std::string::npos)
          << e.what();
    }
  });
}

TEST(DeferredInit, FrozenParametersCannotBeDeferred) {
  testing::run_ranks(1, [](dist::CommPtr comm, int) {
    auto model = make_user_model();
    torch::NoGradGuard no_grad;
    model->emb->weight.set_data(torch::zeros({}).expand({kVocab, 8}));  // by hand
    EngineOptions options;
    options.param_init = [](const std::string&, torch::Tensor v) { v.zero_(); };
    EXPECT_THROW(ZeroEngine(model.ptr(), testing::base_config(2, 1, kGlobal, 1), comm, options),
                 UsageError);
  });
}

}  // namespace
}  // namespace zoff::engine::deferred_init_test
