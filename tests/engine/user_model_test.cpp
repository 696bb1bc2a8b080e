// A user's LibTorch model (BatchNorm, a frozen embedding, tied weights) trained by the
// engine at stages 0-3 against plain LibTorch AdamW over the same micro-batches.
#include "user_model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "engine_test_support.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/optim/state_dtype.h"
#include "zoff/unit/unit_call.h"

namespace zoff::engine::user_model_test {
namespace {

using testing::kVocab;
using testing::make_user_model;
using testing::UserModel;

constexpr int kSteps = 8;
constexpr int64_t kGlobal = 12;
std::pair<torch::Tensor, torch::Tensor> batch(int64_t step) {
  auto gen = torch::make_generator<torch::CPUGeneratorImpl>(500 + step);
  return {torch::randint(kVocab, {kGlobal}, gen), torch::randint(3, {kGlobal}, gen)};
}

// Trainable parameters once each, in registration order (the tied weight once).
std::vector<torch::Tensor> unique_trainable(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  std::set<const void*> seen;
  for (auto& p : m.parameters()) {
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

torch::Tensor flat(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> parts;
  for (auto& t : ts) parts.push_back(t.detach().to(torch::kFloat32).reshape({-1}).clone());
  return torch::cat(parts);
}

struct Run {
  std::vector<double> losses;
  torch::Tensor params;
  torch::Tensor buffers;
};

// One process, the ranks' micro-batches one after another, gradients accumulated.
Run run_reference(const config::Config& cfg, int world) {
  auto model = make_user_model(false);
  auto params = unique_trainable(*model);
  torch::optim::AdamW opt(
      params,
      torch::optim::AdamWOptions(cfg.optimizer.lr).weight_decay(cfg.optimizer.weight_decay));
  const int64_t accum = cfg.gradient_accumulation_steps, micro = cfg.train_micro_batch_size_per_gpu;
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    double sum = 0;
    for (int64_t k = 0; k < accum; ++k) {
      for (int r = 0; r < world; ++r) {
        const int64_t start = (k * world + r) * micro;
        auto loss = torch::nn::functional::cross_entropy(model(x.narrow(0, start, micro)),
                                                         y.narrow(0, start, micro));
        (loss / static_cast<double>(accum * world)).backward();
        sum += loss.item<double>();
      }
    }
    opt.step();
    run.losses.push_back(sum / static_cast<double>(accum * world));
  }
  run.params = flat(params);
  return run;
}

std::vector<Run> run_engine(const config::Config& cfg, int world) {
  std::vector<Run> runs(static_cast<size_t>(world));
  std::vector<UserModel> models;
  for (int r = 0; r < world; ++r) models.push_back(make_user_model());
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    ZeroEngine engine(model.ptr(), cfg, comm);
    const int64_t accum = cfg.gradient_accumulation_steps,
                  micro = cfg.train_micro_batch_size_per_gpu;
    auto& run = runs[static_cast<size_t>(rank)];
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = batch(s);
      double sum = 0;
      for (int64_t k = 0; k < accum; ++k) {
        const int64_t start = (k * world + rank) * micro;
        auto loss = torch::nn::functional::cross_entropy(
            model(x.narrow(0, start, micro)).to(torch::kFloat32), y.narrow(0, start, micro));
        engine.backward(loss);
        sum += loss.item<double>();
      }
      auto mean = torch::tensor({sum / static_cast<double>(accum)}, torch::kFloat64);
      comm->all_reduce_sum(mean)->wait();
      engine.step();
      run.losses.push_back(mean.item<double>() / world);
    }
    zoff::with_unit(*model, [&] {
      run.params = flat(unique_trainable(*model));
      return run.params;
    });
    run.buffers = flat({model->bn->running_mean, model->bn->running_var,
                        model->bn->num_batches_tracked.to(torch::kFloat32)});
  });
  return runs;
}

config::Config user_config(int stage, int world) {
  auto cfg = testing::base_config(stage, world, kGlobal, /*accum=*/2);
  cfg.optimizer.type = "adamw";
  return cfg;
}

class UserModelMatchesLibTorch : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(UserModelMatchesLibTorch, LossesParametersAndEqualBuffers) {
  const auto [stage, world] = GetParam();
  const auto cfg = user_config(stage, world);
  const auto ref = run_reference(cfg, world);
  const auto runs = run_engine(cfg, world);
  double worst = 0;
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    const double rel = std::abs(runs[0].losses[s] - ref.losses[s]) / std::abs(ref.losses[s]);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, testing::kLossRelTol) << "step " << s;
  }
  const double pdiff = testing::rel_diff(runs[0].params, ref.params);
  EXPECT_LT(pdiff, testing::kParamRelTol);
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(torch::equal(runs[0].params, runs[static_cast<size_t>(r)].params)) << "rank " << r;
    EXPECT_TRUE(torch::equal(runs[0].buffers, runs[static_cast<size_t>(r)].buffers))
        << "buffers of rank " << r << " differ from rank 0's";
  }
  std::printf("stage %d world %d: worst loss rel diff %.3g, param rel diff %.3g\n", stage, world,
              worst, pdiff);
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, UserModelMatchesLibTorch,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(1, 2, 3)));

// Each variant's run has the losses and parameters of `want` bit for bit, on every rank
// (and its buffers too when `buffers`).
void expect_variants_bitwise(const std::vector<Run>& want,
                             const std::vector<config::Config>& variants, int world,
                             bool buffers = false) {
  for (size_t v = 0; v < variants.size(); ++v) {
    const auto got = run_engine(variants[v], world);
    for (int r = 0; r < world; ++r) {
      const auto& a = want[static_cast<size_t>(r)];
      const auto& b = got[static_cast<size_t>(r)];
      EXPECT_EQ(a.losses, b.losses) << "variant " << v << " rank " << r;
      EXPECT_TRUE(torch::equal(a.params, b.params)) << "variant " << v << " rank " << r;
      if (buffers) {
        EXPECT_TRUE(torch::equal(a.buffers, b.buffers)) << "variant " << v << " rank " << r;
      }
    }
  }
}

// offload_optimizer.device = nvme runs the same kernels on the same values as cpu, only
// streamed from files in sub-groups: losses, parameters and buffers are equal bit for bit.
class UserModelNvmeOffload : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

TEST_P(UserModelNvmeOffload, IsBitwiseTheCpuOffloadRun) {
  const auto [stage, world, bf16] = GetParam();
  auto cfg = user_config(stage, world);
  cfg.bf16 = bf16;
  cfg.zero.offload_optimizer.device = "cpu";
  const auto want = run_engine(cfg, world);
  const std::string dir = "/var/tmp/zoff_user_model_nvme_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {dir};
  cfg.zero.sub_group_size = 1024;
  // The step overlapped with backward (the default: no clipping, no fp16) or after it, and
  // at stage 3 the parameter pieces on disk too.
  std::vector<config::Config> variants{cfg, cfg};
  variants[1].zero.offload_optimizer.overlap_step = false;
  if (stage == 3) {
    variants.push_back(cfg);
    variants.back().zero.offload_param.device = "nvme";
    variants.back().zero.offload_param.nvme_paths = {dir};
    variants.back().zero.offload_param.max_in_cpu = 50;  // read ahead a unit or two
  }
  if (stage >= 2) {
    // The gradient shard in the tier too: micro-batches added into the file, the mean
    // over ranks taken there; with the step overlapped and after backward.
    for (bool overlap : {true, false}) {
      variants.push_back(variants.back());
      variants.back().zero.offload_optimizer.gradients = "nvme";
      variants.back().zero.offload_optimizer.overlap_step = overlap;
    }
  }
  expect_variants_bitwise(want, variants, world, /*buffers=*/true);
  // The tier removed its files when the engine went away.
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsPrecisions, UserModelNvmeOffload,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 3),
                                            ::testing::Bool()));

// Compressed states in the nvme tier: the stored codes, bf16 bits and scales stepped sub-group
// by sub-group with the StateSpan kernels, with the gradient shard on nvme too, equal the
// cpu offload run with the same state dtype bit for bit.
class UserModelNvmeCompressedStates
    : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

TEST_P(UserModelNvmeCompressedStates, IsBitwiseTheCpuOffloadRun) {
  const auto [stage, world, dtype] = GetParam();
  auto cfg = user_config(stage, world);
  cfg.bf16 = true;
  cfg.optimizer.state_dtype = dtype;
  cfg.zero.offload_optimizer.device = "cpu";
  const auto want = run_engine(cfg, world);
  const std::string dir = "/var/tmp/zoff_user_model_nvme_states_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {dir};
  cfg.zero.sub_group_size = 1024;  // rounded up to whole int8 blocks and aligned codes
  std::vector<config::Config> variants{cfg, cfg};
  variants[1].zero.offload_optimizer.gradients = "nvme";
  variants[1].zero.offload_optimizer.overlap_step = false;
  expect_variants_bitwise(want, variants, world);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsDtypes, UserModelNvmeCompressedStates,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 3),
                                            ::testing::Values("bf16", "int8")));

// Streamed gradients (offload_optimizer.gradients = "stream"): no gradient shard anywhere,
// each sub-group stepped from its window buffer as soon as backward completed it. The
// arithmetic is the in-memory overlapped step's, so losses and parameters are bitwise the
// cpu offload run's; a window of 3 buffers makes backward wait for the step.
class UserModelNvmeStreamedGradients
    : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

TEST_P(UserModelNvmeStreamedGradients, IsBitwiseTheCpuOffloadRun) {
  const auto [stage, world, dtype] = GetParam();
  auto cfg = testing::base_config(stage, world, kGlobal, /*accum=*/1);
  cfg.optimizer.type = "adamw";
  cfg.optimizer.state_dtype = dtype;
  cfg.bf16 = true;
  cfg.zero.offload_optimizer.device = "cpu";
  const auto want = run_engine(cfg, world);
  const std::string dir = "/var/tmp/zoff_user_model_stream_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {dir};
  cfg.zero.offload_optimizer.gradients = "stream";
  cfg.zero.sub_group_size = 1024;
  std::vector<config::Config> variants{cfg, cfg};
  variants[1].zero.offload_optimizer.stream_buffers = 3;
  if (stage == 3) {
    variants[1].zero.offload_param.device = "nvme";
    variants[1].zero.offload_param.nvme_paths = {dir};
  }
  expect_variants_bitwise(want, variants, world);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsDtypes, UserModelNvmeStreamedGradients,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 3),
                                            ::testing::Values("fp32", "int8")));

// What streamed gradients cannot do is refused at construction, naming the key and why.
TEST(UserModelNvmeStreamedGradientsRefused, WhereTheyCannotWork) {
  auto base = testing::base_config(2, 1, kGlobal, /*accum=*/1);
  base.optimizer.type = "adamw";
  base.zero.offload_optimizer.device = "nvme";
  base.zero.offload_optimizer.nvme_paths = {"/var/tmp"};
  base.zero.offload_optimizer.gradients = "stream";
  std::vector<std::pair<config::Config, std::string>> bad;
  bad.emplace_back(base, "gradient_clipping");
  bad.back().first.gradient_clipping = 1.0;
  bad.emplace_back(testing::base_config(2, 1, kGlobal, /*accum=*/2),
                   "gradient_accumulation_steps = 2");
  bad.back().first.optimizer.type = "adamw";
  bad.back().first.zero.offload_optimizer = base.zero.offload_optimizer;
  bad.emplace_back(base, "overlap_step = false");
  bad.back().first.zero.offload_optimizer.overlap_step = false;
  bad.emplace_back(base, "fp16");
  bad.back().first.fp16.enabled = true;
  bad.emplace_back(base, "needs stage 2 or 3");
  bad.back().first.zero.stage = 1;
  for (const auto& [cfg, why] : bad) {
    testing::run_ranks(1, [&](dist::CommPtr comm, int) {
      auto model = make_user_model();
      try {
        ZeroEngine engine(model.ptr(), cfg, comm);
        ADD_FAILURE() << "accepted: " << why;
      } catch (const UsageError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("offload_optimizer.gradients = stream"), std::string::npos) << what;
        EXPECT_NE(what.find(why), std::string::npos) << what;
      }
    });
  }
}

// A tier file deleted or truncated between steps (another process, a cleanup script):
// the next step fails with one error naming the file, before any byte moves, and so does
// every step after it (the run never goes on from data it cannot trust).
class UserModelNvmeFileFault : public ::testing::TestWithParam<bool> {};

TEST_P(UserModelNvmeFileFault, NextStepFailsNamingTheFile) {
  const bool truncate = GetParam();
  const std::string dir = "/var/tmp/zoff_user_model_fault_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto cfg = user_config(2, 1);
  cfg.zero.offload_optimizer.device = "nvme";
  cfg.zero.offload_optimizer.nvme_paths = {dir};
  cfg.zero.sub_group_size = 1024;
  const std::string victim = dir + "/zoff_rank0.exp_avg.swp";
  auto model = make_user_model();
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    ZeroEngine engine(model.ptr(), cfg, comm);
    auto train_step = [&](int s) {
      auto [x, y] = batch(s);
      for (int64_t k = 0; k < cfg.gradient_accumulation_steps; ++k) {
        const int64_t micro = cfg.train_micro_batch_size_per_gpu;
        engine.backward(torch::nn::functional::cross_entropy(
            model(x.narrow(0, k * micro, micro)).to(torch::kFloat32),
            y.narrow(0, k * micro, micro)));
      }
      engine.step();
    };
    train_step(0);
    ASSERT_TRUE(std::filesystem::exists(victim));
    if (truncate) {
      std::filesystem::resize_file(victim, 0);  // the user model's file is one 4 KiB block
    } else {
      std::filesystem::remove(victim);
    }
    for (int attempt = 1; attempt <= 2; ++attempt) {
      try {
        train_step(attempt);
        ADD_FAILURE() << "a step ran on a " << (truncate ? "truncated" : "deleted") << " file";
      } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(victim), std::string::npos) << what;
        EXPECT_NE(what.find(truncate ? "truncated" : "deleted"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
      }
    }
  });
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(DeletedOrTruncated, UserModelNvmeFileFault, ::testing::Bool());

// optimizer.state_dtype bf16 / int8: the same training with m and v stored compressed. Against
// LibTorch's fp32 AdamW within named tolerances (the rounding of m and v, 8 steps at lr
// 1e-2); the ranks agree bit for bit; the cpu offload tier runs the same kernels on the
// same values, so it equals the in-memory run bit for bit.
// Measured: 2.3e-4 (bf16) and 1.8e-3 (int8) at worst over stages 0-3, worlds 1 and 3.
constexpr double kBf16StatesParamRelTol = 1e-3;
constexpr double kInt8StatesParamRelTol = 5e-3;

class UserModelCompressedStates
    : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

TEST_P(UserModelCompressedStates, NearLibTorchAndOffloadIsBitwiseInMemory) {
  const auto [stage, world, dtype] = GetParam();
  auto cfg = user_config(stage, world);
  const auto ref = run_reference(cfg, world);
  cfg.optimizer.state_dtype = dtype;
  const auto runs = run_engine(cfg, world);
  const double pdiff = testing::rel_diff(runs[0].params, ref.params);
  EXPECT_LT(pdiff, dtype == "bf16" ? kBf16StatesParamRelTol : kInt8StatesParamRelTol);
  EXPECT_GT(pdiff, 0.0) << "the states were not compressed";
  for (int r = 1; r < world; ++r) {
    EXPECT_TRUE(torch::equal(runs[0].params, runs[static_cast<size_t>(r)].params)) << "rank " << r;
  }
  if (stage >= 1) {
    cfg.zero.offload_optimizer.device = "cpu";
    const auto offloaded = run_engine(cfg, world);
    EXPECT_EQ(offloaded[0].losses, runs[0].losses);
    EXPECT_TRUE(torch::equal(offloaded[0].params, runs[0].params));
  }
  std::printf("stage %d world %d %s states: param rel diff to LibTorch fp32 %.3g\n", stage, world,
              dtype.c_str(), pdiff);
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsDtypes, UserModelCompressedStates,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(1, 3),
                                            ::testing::Values("bf16", "int8")));

// The optimizer bytes the engine reports (memory().optim(): master + states) are the stored
// bytes: 4 B master + 8 / 4 / ~2 B of states per shard element (int8: one 4-byte scale per
// 2048 elements, so the user model's few hundred elements pay ~2.05 B; ~2.004 B at scale).
TEST(UserModelCompressedStates, MemoryReportsTheStoredBytes) {
  for (const std::string dtype : {"fp32", "bf16", "int8"}) {
    auto cfg = user_config(2, 1);
    cfg.optimizer.state_dtype = dtype;
    cfg.zero.offload_optimizer.device = "cpu";
    auto model = make_user_model();
    testing::run_ranks(1, [&](dist::CommPtr comm, int) {
      ZeroEngine engine(model.ptr(), cfg, comm);
      const auto n = static_cast<size_t>(engine.shard().size);
      const size_t states = 2 * optim::state_storage_bytes(optim::parse_state_dtype(dtype), n);
      EXPECT_EQ(engine.memory().optim(), 4 * n + states) << dtype;
      const size_t per_state = dtype == "fp32"   ? 4 * n
                               : dtype == "bf16" ? 2 * n
                                                 : n + 4 * ((n + 2047) / 2048);
      EXPECT_EQ(states, 2 * per_state) << dtype;
    });
  }
}

TEST(UserModelCompressedStates, TorchBackendIsRefusedInOneLine) {
  auto cfg = user_config(2, 1);
  cfg.optimizer.state_dtype = "int8";
  auto model = make_user_model();
  EngineOptions torch_backend;
  torch_backend.optimizer_backend = optim::OptimizerBackend::kTorch;
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    try {
      ZeroEngine engine(model.ptr(), cfg, comm, torch_backend);
      ADD_FAILURE() << "int8 states with the torch backend were accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("state_dtype = 'int8' needs the fused backend"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(UserModel, TiedWeightIsOneParameterAndFrozenOnesAreNotTrained) {
  auto model = make_user_model();
  const auto frozen_before = model->emb->weight.clone();
  auto cfg = user_config(2, 1);
  testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    ZeroEngine engine(model.ptr(), cfg, comm);
    int64_t trainable = 0;
    for (auto& p : unique_trainable(*model)) trainable += p.numel();
    EXPECT_EQ(engine.layout().numel(), trainable);
    EXPECT_TRUE(model->dec->weight.is_same(model->a->weight));
    auto [x, y] = batch(0);
    for (int k = 0; k < 2; ++k) {
      engine.backward(torch::nn::functional::cross_entropy(model(x.narrow(0, 6 * k, 6)),
                                                           y.narrow(0, 6 * k, 6)));
    }
    engine.step();
  });
  EXPECT_TRUE(torch::equal(model->emb->weight, frozen_before));
}

TEST(UserModel, RunsInBf16WithBuffersAndFrozenWeightsInBf16) {
  for (int stage : {0, 3}) {
    auto cfg = user_config(stage, 2);
    cfg.bf16 = true;
    std::vector<UserModel> models{make_user_model(), make_user_model()};
    testing::run_ranks(2, [&](dist::CommPtr comm, int rank) {
      auto model = models[static_cast<size_t>(rank)];
      ZeroEngine engine(model.ptr(), cfg, comm);
      EXPECT_EQ(model->bn->running_mean.scalar_type(), torch::kBFloat16);
      EXPECT_EQ(model->emb->weight.scalar_type(), torch::kBFloat16);
      for (int s = 0; s < 3; ++s) {
        auto [x, y] = batch(s);
        for (int k = 0; k < 2; ++k) {
          const int64_t start = (k * 2 + rank) * 3;
          auto loss = torch::nn::functional::cross_entropy(
              model(x.narrow(0, start, 3)).to(torch::kFloat32), y.narrow(0, start, 3));
          EXPECT_TRUE(std::isfinite(loss.item<double>()));
          engine.backward(loss);
        }
        engine.step();
      }
    });
  }
}

TEST(UserModel, LossBackwardInsteadOfEngineBackwardIsAnError) {
  for (int stage : {0, 2, 3}) {
    auto model = make_user_model();
    auto cfg = user_config(stage, 1);
    testing::run_ranks(1, [&](dist::CommPtr comm, int) {
      ZeroEngine engine(model.ptr(), cfg, comm);
      auto [x, y] = batch(0);
      auto loss = torch::nn::functional::cross_entropy(model(x.narrow(0, 0, 6)), y.narrow(0, 0, 6));
      try {
        loss.backward();
        ADD_FAILURE() << "stage " << stage << ": loss.backward() was accepted";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("engine.backward(loss)"), std::string::npos)
            << e.what();
      }
    });
  }
}

}  // namespace
}  // namespace zoff::engine::user_model_test
