// ZeRO-Offload on a GPU: gpt small computing on the GPU with zoff's CPU optimizer, against
// the same model with LibTorch's AdamW on the GPU; skipped, with the reason in one line,
// where no GPU is visible.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "offload/offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/core/torch_cuda.h"
#include "zoff/dist/single_comm.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/models/gpt.h"
#include "zoff_test_paths.h"

namespace zoff::train::gpu_training_test {
namespace {

// Per-step loss, relative, zoff against the reference. fp32: the two differ only in the
// optimizer's rounding (zoff's fused CPU AdamW against LibTorch's on the GPU, ~1 ulp per
// element and step). bf16: both compute with the same bf16 parameters, but a 1-ulp
// difference in the fp32 master can round to a different bf16 parameter, and such flips
// grow over the steps.
constexpr double kFp32LossRelTol = 1e-5;
constexpr double kBf16LossRelTol = 1e-2;
constexpr int kSteps = 20;
constexpr int64_t kBatch = 8;
constexpr uint64_t kSeed = 1234;

#define ZOFF_SKIP_WITHOUT_GPU()                          \
  do {                                                   \
    const std::string why = ::zoff::load_torch_cuda();   \
    if (!why.empty()) GTEST_SKIP() << "no GPU: " << why; \
  } while (0)

// Text to learn: this repository's README, bytes as tokens (real text that travels with
// the tree to a GPU machine).
const std::vector<uint8_t>& corpus() {
  static const std::vector<uint8_t> bytes = [] {
    std::ifstream in(std::filesystem::path(ZOFF_SOURCE_DIR) / "README.md", std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }();
  return bytes;
}

// Step `step`'s batch: kBatch windows of T + 1 bytes at fixed pseudo-random offsets, on the
// GPU. Returns (inputs, targets).
std::pair<torch::Tensor, torch::Tensor> batch(int step, int64_t T) {
  const auto& text = corpus();
  ZOFF_CHECK(static_cast<int64_t>(text.size()) > T + 1, "README.md too short");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(kSeed + static_cast<uint64_t>(step));
  auto starts = torch::randint(static_cast<int64_t>(text.size()) - T - 1, {kBatch}, gen);
  auto windows = torch::empty({kBatch, T + 1}, torch::kInt64);
  for (int64_t b = 0; b < kBatch; ++b) {
    const int64_t s = starts[b].item<int64_t>();
    for (int64_t t = 0; t <= T; ++t) windows[b][t] = static_cast<int64_t>(text[s + t]);
  }
  windows = windows.to(torch::kCUDA);
  return {windows.narrow(1, 0, T), windows.narrow(1, 1, T)};
}

models::GptConfig small_config() { return models::gpt_preset("small"); }

config::Config offload_config(int stage, torch::ScalarType dtype, const std::string& device) {
  config::Config c;
  c.train_batch_size = kBatch;
  c.train_micro_batch_size_per_gpu = kBatch;
  c.gradient_accumulation_steps = 1;
  c.optimizer.type = "adamw";
  c.optimizer.lr = 1e-3;
  c.optimizer.weight_decay = 0.01;
  c.zero.stage = stage;
  c.zero.offload_optimizer.device = device;
  c.zero.offload_optimizer.pin_memory = true;
  c.zero.reduce_bucket_size = 2'000'000;  // several buckets
  c.bf16 = dtype == torch::kBFloat16;
  c.fp16.enabled = dtype == torch::kHalf;
  return c;
}

// gpt small trained through the engine on the GPU: per-step losses.
std::vector<double> zoff_losses(const config::Config& config, int steps = kSteps) {
  torch::manual_seed(kSeed);
  models::Gpt model(small_config());
  model->to(torch::kCUDA);
  engine::ZeroEngine engine(model.ptr(), config, std::make_shared<dist::SingleComm>());
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, small_config().block_size);
    auto loss = models::gpt_loss(model->forward(x), y);
    engine.backward(loss);
    engine.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// The reference: an fp32 master model on the GPU updated by LibTorch's AdamW; with a 16-bit
// dtype, a second copy computes forward and backward in it, its gradients widened to fp32
// into the master's, and the updated master rounded back into it after each step.
std::vector<double> reference_losses(torch::ScalarType dtype, int steps = kSteps) {
  torch::manual_seed(kSeed);
  models::Gpt master(small_config());
  torch::manual_seed(kSeed);
  models::Gpt compute(small_config());
  master->to(torch::kCUDA);
  compute->to(torch::kCUDA, dtype);
  auto master_params = master->parameters();
  auto compute_params = compute->parameters();
  torch::optim::AdamW adamw(master_params, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, small_config().block_size);
    auto loss = models::gpt_loss(compute->forward(x), y);
    loss.backward();
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < master_params.size(); ++i) {
      master_params[i].mutable_grad() = compute_params[i].grad().to(torch::kFloat32);
      compute_params[i].mutable_grad().reset();
    }
    adamw.step();
    for (size_t i = 0; i < master_params.size(); ++i) compute_params[i].copy_(master_params[i]);
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// Per-step losses within `tol` (relative); the largest difference goes into the test's
// JSON report (--gtest_output) as `max_rel_diff_<label>`: scripts/gpu/check.sh's figure.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& label) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::abs(want[i])) << "step " << i + 1;
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::abs(want[i]));
  }
  ::testing::Test::RecordProperty("max_rel_diff_" + label, std::to_string(worst));
  std::printf("%s: loss %.4f -> %.4f, max rel diff %.2e\n", label.c_str(), got.front(), got.back(),
              worst);
  EXPECT_LT(got.back(), got.front()) << "the loss did not fall";
}

TEST(GpuOffload, Fp32MatchesLibTorchAdamWOnTheGpuAtStages1To3) {
  ZOFF_SKIP_WITHOUT_GPU();
  const auto want = reference_losses(torch::kFloat32);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    expect_close(zoff_losses(offload_config(stage, torch::kFloat32, "cpu")), want, kFp32LossRelTol,
                 "fp32_stage" + std::to_string(stage));
  }
}

TEST(GpuOffload, Bf16MatchesLibTorchAdamWOnTheGpuAtStages1To3) {
  ZOFF_SKIP_WITHOUT_GPU();
  const auto want = reference_losses(torch::kBFloat16);
  for (int stage : {1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    expect_close(zoff_losses(offload_config(stage, torch::kBFloat16, "cpu")), want, kBf16LossRelTol,
                 "bf16_stage" + std::to_string(stage));
  }
}

// offload_config(stage, bf16, "nvme") with the optimizer's files (and at stage 3 the
// parameters' with `params_on_nvme`) in a fresh directory under /var/tmp, removed after:
// the losses of `steps` steps.
std::vector<double> nvme_losses(int stage, const std::string& gradients, bool params_on_nvme,
                                int steps) {
  const offload::testing::TempDir dir;
  auto nvme = offload_config(stage, torch::kBFloat16, "nvme");
  nvme.zero.offload_optimizer.nvme_paths = {dir.path()};
  nvme.zero.offload_optimizer.gradients = gradients;
  if (params_on_nvme) {
    nvme.zero.offload_param.device = "nvme";
    nvme.zero.offload_param.nvme_paths = {dir.path()};
  }
  return zoff_losses(nvme, steps);
}

// The same kernels stream through files: the same losses bit for bit.
TEST(GpuOffload, NvmeOffloadGivesTheLossesOfCpuOffload) {
  ZOFF_SKIP_WITHOUT_GPU();
  const auto want = zoff_losses(offload_config(2, torch::kBFloat16, "cpu"), 5);
  EXPECT_EQ(nvme_losses(2, "cpu", false, 5), want);
}

// Stage 3 with everything on disk (ZeRO-Infinity's placement): the optimizer tier streamed
// beside backward and the unit pieces read from disk, gathered in host memory and copied
// to the GPU unit by unit: the losses of stage 3 with both in host memory, bit for bit.
TEST(GpuOffload, Stage3WithEverythingOnNvmeGivesTheLossesOfCpuOffload) {
  ZOFF_SKIP_WITHOUT_GPU();
  const auto want = zoff_losses(offload_config(3, torch::kBFloat16, "cpu"), 5);
  EXPECT_EQ(nvme_losses(3, "stream", true, 5), want);
}

// fp16 with dynamic loss scaling: overflowing steps are skipped and the scale halves; the
// loss still falls and stays within bf16's tolerance of the fp32 reference.
TEST(GpuOffload, Fp16TrainsWithDynamicLossScaling) {
  ZOFF_SKIP_WITHOUT_GPU();
  auto config = offload_config(2, torch::kHalf, "cpu");
  config.fp16.initial_scale_power = 10;
  const auto got = zoff_losses(config);
  for (double l : got) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(got.back(), got.front() * 0.9);
}

// The paper's delayed parameter update: each CPU step overlaps the next GPU step; after
// the warm-up, forward sees parameters one step old. Trains, and synchronize() lands it.
TEST(GpuOffload, DelayedParameterUpdateTrains) {
  ZOFF_SKIP_WITHOUT_GPU();
  auto config = offload_config(2, torch::kBFloat16, "cpu");
  config.zero.offload_optimizer.delayed_param_update = true;
  config.zero.offload_optimizer.dpu_warmup_steps = 5;
  const auto got = zoff_losses(config);
  EXPECT_LT(got.back(), got.front() * 0.9);
}

TEST(GpuOffload, RefusesWhatTheGpuPathDoesNotDo) {
  ZOFF_SKIP_WITHOUT_GPU();
  auto try_config = [](const config::Config& config) -> std::string {
    torch::manual_seed(kSeed);
    models::Gpt model(models::gpt_preset("tiny"));
    model->to(torch::kCUDA);
    try {
      engine::ZeroEngine engine(model.ptr(), config, std::make_shared<dist::SingleComm>());
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(try_config(offload_config(0, torch::kBFloat16, "cpu"))
                .find("needs zero_optimization.stage >= 1"),
            std::string::npos);
  EXPECT_NE(try_config(offload_config(2, torch::kBFloat16, "none")).find("needs cpu or nvme"),
            std::string::npos);
}

}  // namespace
}  // namespace zoff::train::gpu_training_test
