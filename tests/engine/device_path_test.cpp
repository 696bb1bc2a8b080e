// The GPU path's data movement with the CPU standing in for the device
// (EngineOptions::device_path_on_cpu): the same losses and parameters, bit for bit, as the
// usual CPU path, across stages 1-3, dtypes, accumulation, uneven world sizes and the disk
// tiers; and what the path refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine_test_support.h"
#include "zoff/core/device_transfer.h"
#include "zoff/core/error.h"
#include "zoff/dist/single_comm.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine::device_path_test {
namespace {

using testing::base_config;
using testing::global_batch;
using testing::make_model;

constexpr int64_t kGlobal = 12;
constexpr int kSteps = 6;

struct TrainedRun {
  std::vector<double> losses;  // rank 0's micro-batch losses, in order
  torch::Tensor params;        // rank 0's parameters after the run, fp32
};

TrainedRun train(const config::Config& cfg, int world, bool device_path) {
  std::vector<TrainedRun> runs(static_cast<size_t>(world));
  std::vector<testing::TinyMlp> models;
  for (int r = 0; r < world; ++r) models.push_back(make_model(11));
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    EngineOptions options;
    options.device_path_on_cpu = device_path;
    ZeroEngine engine(model.ptr(), cfg, comm, options);
    auto& run = runs[static_cast<size_t>(rank)];
    const int64_t micro = cfg.train_micro_batch_size_per_gpu;
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      for (int64_t k = 0; k < cfg.gradient_accumulation_steps; ++k) {
        const int64_t start = (k * world + rank) * micro;
        auto out = model(x.narrow(0, start, micro).to(engine.compute_dtype()));
        auto loss = torch::mse_loss(out.to(torch::kFloat32), y.narrow(0, start, micro));
        engine.backward(loss);
        run.losses.push_back(loss.item<double>());
      }
      engine.step();
    }
    // Each unit whole in turn (at stage 3 the units are released after the step).
    std::vector<torch::Tensor> parts;
    engine.visit_parameters([&](const partition::ParamSlot&, const torch::Tensor& p) {
      parts.push_back(p.detach().to(torch::kFloat32).flatten().clone());
    });
    run.params = torch::cat(parts);
  });
  return runs[0];
}

TEST(DevicePath, SameBitsAsTheCpuPathAcrossStagesDtypesAndWorldSizes) {
  for (int world : {1, 2, 3}) {
    for (int stage : {1, 2, 3}) {
      for (bool bf16 : {false, true}) {
        for (int64_t accum : {1, 2}) {
          if (kGlobal % (world * accum) != 0) continue;
          SCOPED_TRACE("world " + std::to_string(world) + " stage " + std::to_string(stage) +
                       (bf16 ? " bf16" : " fp32") + " accum " + std::to_string(accum));
          auto cfg = base_config(stage, world, kGlobal, accum);
          cfg.bf16 = bf16;
          cfg.zero.offload_optimizer.device = "cpu";
          const TrainedRun want = train(cfg, world, false);
          const TrainedRun got = train(cfg, world, true);
          EXPECT_EQ(got.losses, want.losses);
          EXPECT_TRUE(torch::equal(got.params, want.params));
        }
      }
    }
  }
}

// fp16's loss scaling and the delayed parameter update go through the same movement.
TEST(DevicePath, Fp16AndDelayedUpdateMatchTheCpuPath) {
  auto fp16 = base_config(2, 2, kGlobal, 1);
  fp16.fp16.enabled = true;
  fp16.fp16.initial_scale_power = 8;
  fp16.zero.offload_optimizer.device = "cpu";
  auto dpu = base_config(2, 2, kGlobal, 1);
  dpu.bf16 = true;
  dpu.zero.offload_optimizer.device = "cpu";
  dpu.zero.offload_optimizer.delayed_param_update = true;
  dpu.zero.offload_optimizer.dpu_warmup_steps = 2;  // delayed from the third of kSteps
  for (const auto* cfg : {&fp16, &dpu}) {
    const TrainedRun want = train(*cfg, 2, false);
    const TrainedRun got = train(*cfg, 2, true);
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_TRUE(torch::equal(got.params, want.params));
  }
}

// Stage 3 with everything on disk: the optimizer tier streamed beside backward (gradients
// streamed, or kept in the tier) and the unit pieces read from their own tier, gathered in
// host memory and copied to the device's unit buffers.
TEST(DevicePath, Stage3WithEverythingOnDiskMatchesTheCpuPath) {
  const std::string dir = "/var/tmp/zoff_device_path_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  for (const char* grads : {"stream", "nvme"}) {
    SCOPED_TRACE(std::string("gradients ") + grads);
    auto cfg = base_config(3, 3, kGlobal, 1);
    cfg.bf16 = true;
    cfg.zero.sub_group_size = 1024;
    cfg.zero.offload_optimizer.device = "nvme";
    cfg.zero.offload_optimizer.nvme_paths = {dir};
    cfg.zero.offload_optimizer.gradients = grads;
    cfg.zero.offload_param.device = "nvme";
    cfg.zero.offload_param.nvme_paths = {dir};
    const TrainedRun want = train(cfg, 3, false);
    const TrainedRun got = train(cfg, 3, true);
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_TRUE(torch::equal(got.params, want.params));
  }
  std::filesystem::remove_all(dir);
}

std::string refusal(const config::Config& cfg, const EngineOptions& options) {
  auto model = make_model(3);
  try {
    ZeroEngine engine(model.ptr(), cfg, std::make_shared<dist::SingleComm>(), options);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(DevicePath, RefusesStagesAndPlacementsItDoesNotRun) {
  EngineOptions options;
  options.device_path_on_cpu = true;
  auto cfg = base_config(0, 1, kGlobal, 1);
  cfg.zero.offload_optimizer.device = "cpu";
  EXPECT_NE(refusal(cfg, options).find("needs zero_optimization.stage >= 1"), std::string::npos)
      << refusal(cfg, options);
  cfg = base_config(2, 1, kGlobal, 1);
  EXPECT_NE(refusal(cfg, options).find("offload_optimizer.device = none: a GPU module needs"),
            std::string::npos)
      << refusal(cfg, options);
}

// A module with a tensor on another device (here a buffer on the meta device) is refused
// in one line naming it.
TEST(DevicePath, RefusesAModuleSpreadOverTwoDevices) {
  auto model = make_model(3);
  model->register_buffer("elsewhere", torch::zeros({2}, torch::kMeta));
  try {
    ZeroEngine engine(model.ptr(), base_config(2, 1, kGlobal, 1),
                      std::make_shared<dist::SingleComm>());
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("elsewhere is on meta but fc1.weight on cpu"),
              std::string::npos)
        << e.what();
  }
}

TEST(DeviceTransfer, HostCopiesAtOnceAndCudaNeedsItsLibrary) {
  auto host = make_device_transfer(torch::kCPU);
  auto src = torch::arange(5, torch::kFloat32);
  auto dst = torch::zeros({5}, host->host_options(torch::kFloat32));
  host->copy(dst, src);
  EXPECT_TRUE(torch::equal(dst, src));  // before wait(): the host transfer is synchronous
  host->wait();
  // A device type LibTorch has no stream interface for here is refused by name.
  try {
    (void)make_device_transfer(torch::Device(torch::kXLA, 0));
    FAIL() << "accepted an XLA device";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("device xla:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoff::engine::device_path_test
