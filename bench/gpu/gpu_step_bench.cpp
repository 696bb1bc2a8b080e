// zoff_gpu_bench: a GPT training step on one GPU, ZeRO-Offload (zoff's engine, the optimizer
// on the CPU) against everything on the GPU (LibTorch's AdamW), alternating in one run.
//
//   zoff_gpu_bench --preset small --batch 8 --steps 20 --rounds 2 --json out.json
//   zoff_gpu_bench --preset 2.7b --context 1024 --batch 1 --steps 3 --modes offload
//
// Each mode builds the model, trains --warmup + --steps steps on random tokens (bf16
// compute) and reports the median step time, tokens/s and the GPU allocator's peak while it
// ran. "offload": ZeroEngine at stage 2 with offload_optimizer cpu: the fp32 master, the
// AdamW states and the gradient shard in pinned host memory, the fused CPU AdamW; "dpu":
// the same with the delayed parameter update; "stage3": ZeRO-3 with offload_optimizer cpu,
// the 16-bit parameter pieces in host memory and only the units in use whole on the GPU,
// each gathered in host memory and copied over. "gpu": an
// fp32 master model and LibTorch's AdamW on the GPU, a bf16 copy computing, as a user
// without ZeRO would train. Modes alternate round by round (the machine's speed drifts).
#include <c10/core/CachingDeviceAllocator.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "zoff/core/process_memory.h"
#include "zoff/core/torch_cuda.h"
#include "zoff/dist/single_comm.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string preset = "small";
  int64_t layers = 0, width = 0, heads = 0, context = 0;
  int64_t batch = 8;
  int steps = 20, warmup = 3, rounds = 1;
  bool pin_memory = true;
  std::vector<std::string> modes{"offload", "gpu"};
  std::string json;
};

struct Result {
  std::string mode;
  int round = 0;
  double median_step_ms = 0, tokens_per_s = 0, gpu_peak_gib = 0, host_rss_gib = 0;
  double backward_ms = 0, optimizer_ms = 0, allgather_ms = 0;  // offload: medians
  double first_loss = 0, last_loss = 0;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

c10::DeviceAllocator* gpu_allocator() { return c10::getDeviceAllocator(c10::DeviceType::CUDA); }

double gpu_peak_gib() {
  const auto stats = gpu_allocator()->getDeviceStats(0);
  return static_cast<double>(
             stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
                 .peak) /
         kGiB;
}

zoff::models::GptConfig model_config(const Options& o) {
  auto c = zoff::models::gpt_preset(o.preset, o.context);
  if (o.layers > 0) c.n_layer = o.layers;
  if (o.width > 0) c.n_embd = o.width;
  if (o.heads > 0) c.n_head = o.heads;
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::pair<torch::Tensor, torch::Tensor> random_batch(const Options& o, int64_t T, int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(1000 + step));
  auto w = torch::randint(256, {o.batch, T + 1}, gen).to(torch::kCUDA);
  return {w.narrow(1, 0, T), w.narrow(1, 1, T)};
}

// Runs `step(i)` (returning the loss) warmup + steps times; fills the timing fields.
template <class Step>
void time_steps(const Options& o, int64_t T, Result* r, Step&& step) {
  std::vector<double> ms;
  for (int i = 0; i < o.warmup + o.steps; ++i) {
    const auto start = Clock::now();
    const double loss = step(i);  // .item(): the step's GPU work is done
    const double t = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (i == 0) r->first_loss = loss;
    r->last_loss = loss;
    if (i >= o.warmup) ms.push_back(t);
  }
  r->median_step_ms = median(ms);
  r->tokens_per_s = static_cast<double>(o.batch * T) / (r->median_step_ms / 1000.0);
}

// "offload"; "dpu": the same with the delayed parameter update from the first step (the CPU
// step of step t runs while the GPU computes step t + 1); "stage3": ZeRO-3, the parameters'
// pieces in host memory.
Result run_offload(const Options& o, const std::string& mode) {
  const auto cfg = model_config(o);
  const bool delayed = mode == "dpu";
  Result r;
  r.mode = mode;
  torch::manual_seed(1);
  zoff::models::Gpt model(cfg);
  model->to(torch::kCUDA);
  zoff::config::Config c;
  c.train_batch_size = c.train_micro_batch_size_per_gpu = o.batch;
  c.gradient_accumulation_steps = 1;
  c.optimizer.type = "adamw";
  c.optimizer.lr = 1e-4;
  c.bf16 = true;
  c.zero.stage = mode == "stage3" ? 3 : 2;
  c.zero.offload_optimizer.device = "cpu";
  c.zero.offload_optimizer.pin_memory = o.pin_memory;
  c.zero.offload_optimizer.delayed_param_update = delayed;
  c.zero.offload_optimizer.dpu_warmup_steps = 0;
  zoff::engine::EngineOptions eo;
  eo.optimizer_threads = static_cast<int>(std::thread::hardware_concurrency());
  zoff::engine::ZeroEngine engine(model.ptr(), c, std::make_shared<zoff::dist::SingleComm>(), eo);
  std::vector<double> bwd, opt, gather;
  time_steps(o, cfg.block_size, &r, [&](int i) {
    auto [x, y] = random_batch(o, cfg.block_size, i);
    auto loss = zoff::models::gpt_loss(model->forward(x), y);
    engine.backward(loss);
    const auto stats = engine.step();
    if (i >= o.warmup) {
      bwd.push_back(stats.times.backward_ms);
      opt.push_back(stats.times.optimizer_ms);
      gather.push_back(stats.times.allgather_ms);
    }
    return loss.item<double>();
  });
  r.backward_ms = median(bwd);
  r.optimizer_ms = median(opt);
  r.allgather_ms = median(gather);
  return r;
}

Result run_gpu(const Options& o) {
  const auto cfg = model_config(o);
  Result r;
  r.mode = "gpu";
  torch::manual_seed(1);
  zoff::models::Gpt master(cfg);
  torch::manual_seed(1);
  zoff::models::Gpt compute(cfg);
  master->to(torch::kCUDA);
  compute->to(torch::kCUDA, torch::kBFloat16);
  auto mp = master->parameters();
  auto cp = compute->parameters();
  torch::optim::AdamW adamw(mp, torch::optim::AdamWOptions(1e-4));
  time_steps(o, cfg.block_size, &r, [&](int i) {
    auto [x, y] = random_batch(o, cfg.block_size, i);
    auto loss = zoff::models::gpt_loss(compute->forward(x), y);
    loss.backward();
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < mp.size(); ++k) {
      mp[k].mutable_grad() = cp[k].grad().to(torch::kFloat32);
      cp[k].mutable_grad().reset();
    }
    adamw.step();
    for (size_t k = 0; k < mp.size(); ++k) cp[k].copy_(mp[k]);
    return loss.item<double>();
  });
  return r;
}

nlohmann::json to_json(const Result& r) {
  return {{"mode", r.mode},
          {"round", r.round},
          {"median_step_ms", r.median_step_ms},
          {"tokens_per_s", r.tokens_per_s},
          {"gpu_peak_gib", r.gpu_peak_gib},
          {"host_rss_gib", r.host_rss_gib},
          {"backward_ms", r.backward_ms},
          {"optimizer_ms", r.optimizer_ms},
          {"allgather_ms", r.allgather_ms},
          {"first_loss", r.first_loss},
          {"last_loss", r.last_loss}};
}

int run(const Options& o) {
  const std::string why = zoff::load_torch_cuda();
  if (!why.empty()) {
    std::fprintf(stderr, "zoff_gpu_bench: %s\n", why.c_str());
    return 2;
  }
  // CUDA initializes lazily, with the first tensor on the GPU: the allocator's statistics
  // exist only from then on.
  (void)torch::zeros({1}, torch::kCUDA);
  const auto cfg = model_config(o);
  nlohmann::json out = {{"model",
                         {{"layers", cfg.n_layer},
                          {"width", cfg.n_embd},
                          {"heads", cfg.n_head},
                          {"context", cfg.block_size},
                          {"params", zoff::models::gpt_param_count(cfg)}}},
                        {"batch", o.batch},
                        {"pin_memory", o.pin_memory},
                        {"steps", o.steps},
                        {"results", nlohmann::json::array()}};
  for (int round = 0; round < o.rounds; ++round) {
    auto modes = o.modes;
    if (round % 2 == 1) std::reverse(modes.begin(), modes.end());
    for (const auto& mode : modes) {
      gpu_allocator()->emptyCache();
      gpu_allocator()->resetPeakStats(0);
      Result r = mode == "gpu" ? run_gpu(o) : run_offload(o, mode);
      r.round = round;
      r.gpu_peak_gib = gpu_peak_gib();
      r.host_rss_gib = static_cast<double>(zoff::current_rss_bytes()) / kGiB;
      std::printf(
          "round %d %-8s %9.1f ms/step %10.0f tokens/s  GPU peak %7.2f GiB  host RSS %6.2f GiB"
          "  loss %.4f -> %.4f\n",
          round, mode.c_str(), r.median_step_ms, r.tokens_per_s, r.gpu_peak_gib, r.host_rss_gib,
          r.first_loss, r.last_loss);
      std::fflush(stdout);
      out["results"].push_back(to_json(r));
    }
  }
  if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zoff_gpu_bench: ZeRO-Offload's GPU step against everything on the GPU"};
  Options o;
  app.add_option("--preset", o.preset, "gpt preset (zoff train --preset)");
  app.add_option("--layers", o.layers, "override the preset's layers")->check(CLI::PositiveNumber);
  app.add_option("--width", o.width, "override the preset's width")->check(CLI::PositiveNumber);
  app.add_option("--heads", o.heads, "override the preset's heads")->check(CLI::PositiveNumber);
  app.add_option("--context", o.context, "tokens per sequence (0: the preset's)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "timed steps per mode")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--rounds", o.rounds, "rounds, the mode order alternating")
      ->check(CLI::PositiveNumber);
  app.add_option("--modes", o.modes,
                 "offload, dpu (offload with the delayed update), stage3 (ZeRO-3 offload), gpu")
      ->check(CLI::IsMember({"offload", "dpu", "stage3", "gpu"}));
  app.add_option("--json", o.json, "write the results here");
  app.add_option("--pin-memory", o.pin_memory,
                 "offload: page-locked host buffers (LibTorch rounds each up to a power of two)");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zoff_gpu_bench: %s\n", e.what());
    return 1;
  }
}
