// Shared pieces of the checkpoint tests: a scratch directory and a training run of the
// engine tests' tiny model that can save and resume.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine_test_support.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/unit/unit_call.h"

namespace zoff::checkpoint::testing {

using engine::testing::TinyMlp;

constexpr int64_t kGlobal = 12;  // divisible by accum * world for world 1, 2, 3
constexpr int64_t kAccum = 2;
constexpr uint64_t kSeed = 11;

// A fresh directory under the test temp dir, removed with the object.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "zoff_ckpt_XXXXXX";
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr) << tmpl;
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// AdamW with accumulation, clipping and a warmup: the step count matters for the result.
inline config::Config resume_config(int stage, int world) {
  auto cfg = engine::testing::base_config(stage, world, kGlobal, kAccum);
  cfg.gradient_clipping = 0.5;
  cfg.scheduler.type = "WarmupLR";
  cfg.scheduler.warmup_min_lr = 0.0;
  cfg.scheduler.warmup_max_lr = 1e-2;
  cfg.scheduler.warmup_num_steps = 6;
  cfg.scheduler.warmup_type = "linear";
  return cfg;
}

inline CheckpointInfo run_identity() {
  CheckpointInfo run;
  run.model = "tiny-mlp";
  run.preset = "";
  run.seed = kSeed;
  return run;
}

inline torch::Tensor flatten_params(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().reshape({-1}).clone());
  return torch::cat(parts);
}

struct Segment {
  explicit Segment(int64_t from_step = 0, int64_t to_step = 0, std::string resume_from = "",
                   std::string save_into = "", int64_t save_after = 0)
      : from(from_step),
        to(to_step),
        resume(std::move(resume_from)),
        save_root(std::move(save_into)),
        save_at(save_after) {}
  int64_t from, to;       // optimizer steps [from, to)
  std::string resume;     // load this checkpoint (dir or root) first, when not empty
  std::string save_root;  // save into this root after step save_at, when not empty
  int64_t save_at;
  uint64_t model_seed = kSeed;  // initial weights (overwritten by a resume)
  int64_t model_hidden = 13;    // TinyMlp's hidden width
};

struct Run {
  std::vector<double> losses;  // mean loss of each step, as every rank saw it
  torch::Tensor params;        // rank 0's final parameters, module order
  std::vector<std::shared_ptr<torch::nn::Module>> modules;  // each rank's trained module
};

// One training segment on `world` ranks (threads), as in the engine tests.
inline Run train_segment(const config::Config& cfg, int world, const Segment& seg) {
  std::vector<TinyMlp> models;
  for (int r = 0; r < world; ++r) {
    models.push_back(engine::testing::make_model(seg.model_seed, false, seg.model_hidden));
  }
  std::vector<std::vector<double>> losses(static_cast<size_t>(world));
  std::vector<torch::Tensor> params(static_cast<size_t>(world));
  engine::testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    engine::ZeroEngine engine(model.ptr(), cfg, comm);
    if (!seg.resume.empty()) {
      const auto info = load_checkpoint(engine, seg.resume, run_identity());
      EXPECT_EQ(info.step, seg.from);
      EXPECT_EQ(engine.global_step(), seg.from);
    }
    const int64_t micro = cfg.train_micro_batch_size_per_gpu;
    for (int64_t s = seg.from; s < seg.to; ++s) {
      auto [x, y] = engine::testing::global_batch(s, kGlobal);
      double loss_sum = 0;
      for (int64_t k = 0; k < cfg.gradient_accumulation_steps; ++k) {
        const int64_t start = (k * world + rank) * micro;
        // Inputs in the compute dtype (bf16/fp16 runs), loss in fp32.
        auto out = model(x.narrow(0, start, micro).to(engine.compute_dtype()));
        auto loss = torch::mse_loss(out.to(torch::kFloat32), y.narrow(0, start, micro));
        engine.backward(loss);
        loss_sum += loss.item<double>();
      }
      auto mean = torch::tensor({loss_sum}, torch::kFloat64);
      comm->all_reduce_sum(mean)->wait();
      engine.step();
      losses[static_cast<size_t>(rank)].push_back(mean.item<double>());
      if (!seg.save_root.empty() && s + 1 == seg.save_at) {
        save_checkpoint(engine, seg.save_root, run_identity());
      }
    }
    // Stage 3 releases the parameters between forwards: gather them to read them.
    zoff::with_unit(*model, [&] {
      params[static_cast<size_t>(rank)] = flatten_params(*model);
      return params[static_cast<size_t>(rank)];
    });
  });
  Run run;
  run.losses = losses[0];
  run.params = params[0];
  for (auto& m : models) run.modules.push_back(m.ptr());
  return run;
}

// Runs fn(engine, comm, rank) on `world` ranks with a fresh model and engine each, and
// returns the message of what each rank threw ("" when nothing).
inline std::vector<std::string> errors_on_ranks(
    const config::Config& cfg, int world,
    const std::function<void(engine::ZeroEngine&, TinyMlp&, int)>& fn) {
  std::vector<TinyMlp> models;
  for (int r = 0; r < world; ++r) models.push_back(engine::testing::make_model(kSeed + 100));
  std::vector<std::string> errors(static_cast<size_t>(world));
  engine::testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    auto& model = models[static_cast<size_t>(rank)];
    engine::ZeroEngine engine(model.ptr(), cfg, comm);
    try {
      fn(engine, model, rank);
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(rank)] = std::string("UsageError: ") + e.what();
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(rank)] = std::string("Error: ") + e.what();
    }
  });
  return errors;
}

}  // namespace zoff::checkpoint::testing
