// Shared pieces of the engine tests: ranks as threads, a small model, synthetic batches.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/dist/free_port.h"
#include "zoff/dist/world.h"
#include "zoff/unit/unit_call.h"

namespace zoff::engine::testing {

// Relative tolerance between the engine and plain LibTorch, per step loss and final
// parameters (fp32; only summation order and kernel rounding differ).
constexpr double kLossRelTol = 1e-5;
constexpr double kParamRelTol = 1e-5;

// Three units (fc1, fc2, fc3), marked for stage 3 with zoff::unit_forward, unless `plain`
// (then stage 3 keeps every unit whole: correct, no parameter memory saved). `hidden`
// widens fc1's output (247 parameters at 13; wider when a test needs shards of several
// int8 blocks).
struct TinyMlpImpl : torch::nn::Module {
  explicit TinyMlpImpl(bool plain = false, int64_t hidden = 13) : plain_(plain) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 7));
    fc3 = register_module("fc3", torch::nn::Linear(7, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (plain_) return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
    x = torch::tanh(zoff::unit_forward(fc1, x));
    x = torch::tanh(zoff::unit_forward(fc2, x));
    return zoff::unit_forward(fc3, x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  bool plain_;
};
TORCH_MODULE(TinyMlp);

inline TinyMlp make_model(uint64_t seed, bool plain = false, int64_t hidden = 13) {
  torch::manual_seed(seed);
  return TinyMlp(plain, hidden);
}

// Global batch of `global` samples for `step`, the same whatever the world size.
inline std::pair<torch::Tensor, torch::Tensor> global_batch(int64_t step, int64_t global) {
  auto gen = torch::make_generator<torch::CPUGeneratorImpl>(1000 + step);
  auto x = torch::randn({global, 8}, gen);
  auto y = torch::randn({global, 4}, gen);
  return {x, y};
}

inline config::Config base_config(int stage, int world, int64_t global, int64_t accum) {
  config::Config c;
  c.train_batch_size = global;
  c.gradient_accumulation_steps = accum;
  c.train_micro_batch_size_per_gpu = global / (accum * world);
  c.optimizer.type = "adamw";
  c.optimizer.lr = 1e-2;
  c.optimizer.weight_decay = 0.01;
  c.zero.stage = stage;
  c.zero.reduce_bucket_size = 50;  // many buckets, some straddling shard boundaries
  c.zero.allgather_bucket_size = 30;
  // Stage 3: every unit of these tiny models is released after use and prefetched.
  c.zero.stage3_param_persistence_threshold = 0;
  c.zero.stage3_prefetch_bucket_size = 200;
  return c;
}

inline double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(1e-30, b.norm().item<double>());
}

// One forward and backward of a tiny linear model on the calling thread. The wheel's MKL picks
// its kernels' code paths on their first call; when several rank threads make that first call
// at once, one of them can run another path for a while and get results that differ in the
// last bits (seen: 4 in 100 first runs of a process trained 1 ULP apart, 0 in 250 after this,
// 0 in 300 with MKL_CBWR=AVX2), which bit-for-bit comparisons between runs must not see.
inline void warm_up_compute_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Constant inputs: the warm-up must not draw from the global generator tests seed.
    auto weight = torch::full({13, 8}, 0.5, torch::requires_grad());
    auto bias = torch::zeros({13}, torch::requires_grad());
    torch::tanh(torch::nn::functional::linear(torch::ones({3, 8}), weight, bias)).sum().backward();
  });
}

// Calls fn(comm, rank) on one thread per rank, each with its own Gloo group.
inline void run_ranks(int world, const std::function<void(dist::CommPtr, int)>& fn,
                      const dist::CommOptions& options = {}) {
  warm_up_compute_kernels();
  const int port = dist::pick_free_port();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::WorldInfo w;
        w.rank = r;
        w.world_size = world;
        w.local_rank = r;
        w.local_world_size = world;
        w.master_port = port;
        fn(dist::init_comm(w, std::chrono::seconds(60), options), r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r << " of " << world;
  }
}

}  // namespace zoff::engine::testing
