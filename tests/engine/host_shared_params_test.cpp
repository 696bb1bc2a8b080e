// zero_optimization.host_shared_params: stages 1-2 on one host keep one copy of the compute
// parameters that every rank maps, and train bit for bit like a copy per rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "engine_test_support.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine::host_shared_params_test {
namespace {

using testing::base_config;
using testing::global_batch;
using testing::make_model;

constexpr int kSteps = 6;
constexpr int64_t kGlobal = 12;  // divisible by accum * world for world 2 and 3
constexpr uint64_t kSeed = 11;

struct TrainedRun {
  std::vector<double> losses;         // rank 0's micro-batch losses, in order
  std::vector<torch::Tensor> params;  // every rank's final parameters, fp32, module order
  std::vector<size_t> shared_bytes;   // every rank's memory().host_shared_params
  std::vector<size_t> buffers;        // every rank's memory().compute.buffers
  std::vector<int64_t> shard;         // every rank's shard().size, elements
};

torch::Tensor flatten_params(torch::nn::Module& m) {
  std::vector<torch::Tensor> parts;
  for (auto& p : m.parameters()) parts.push_back(p.detach().to(torch::kFloat32).reshape({-1}));
  return torch::cat(parts);
}

using WrapComm = std::function<dist::CommPtr(dist::CommPtr)>;

// Trains the tiny mlp for kSteps with `cfg` on `world` rank threads (the shared-memory
// transport: every rank is on this host), each engine on wrap(comm) when wrap is given.
TrainedRun train(const config::Config& cfg, int world, const WrapComm& wrap = {}) {
  TrainedRun run;
  run.params.resize(static_cast<size_t>(world));
  run.shared_bytes.resize(static_cast<size_t>(world));
  run.buffers.resize(static_cast<size_t>(world));
  run.shard.resize(static_cast<size_t>(world));
  std::vector<testing::TinyMlp> models;
  for (int r = 0; r < world; ++r) models.push_back(make_model(kSeed));
  const auto dtype = cfg.bf16 ? torch::kBFloat16 : torch::kFloat32;
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    ASSERT_EQ(comm->backend(), "shm");
    auto model = models[static_cast<size_t>(rank)];
    ZeroEngine engine(model.ptr(), cfg, wrap ? wrap(comm) : comm);
    const int64_t micro = cfg.train_micro_batch_size_per_gpu;
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = global_batch(s, kGlobal);
      for (int64_t k = 0; k < cfg.gradient_accumulation_steps; ++k) {
        const int64_t start = (k * world + rank) * micro;
        auto out = model(x.narrow(0, start, micro).to(dtype)).to(torch::kFloat32);
        auto loss = torch::mse_loss(out, y.narrow(0, start, micro));
        engine.backward(loss);
        if (rank == 0) run.losses.push_back(loss.item<double>());
      }
      engine.step();
    }
    engine.synchronize();
    run.params[static_cast<size_t>(rank)] = flatten_params(*model);
    run.shared_bytes[static_cast<size_t>(rank)] = engine.memory().host_shared_params;
    run.buffers[static_cast<size_t>(rank)] = engine.memory().compute.buffers;
    run.shard[static_cast<size_t>(rank)] = engine.shard().size;
  });
  return run;
}

struct SharedCase {
  int stage;
  int world;
  bool bf16;
  bool offload_dpu;  // cpu offload with the delayed parameter update from step 2
  std::string state_dtype = "fp32";
};

void PrintTo(const SharedCase& c, std::ostream* os) {
  *os << "stage " << c.stage << " world " << c.world << (c.bf16 ? " bf16" : " fp32")
      << (c.offload_dpu ? " offload+dpu" : "") << " " << c.state_dtype << " states";
}

class HostSharedParams : public ::testing::TestWithParam<SharedCase> {};

TEST_P(HostSharedParams, TrainBitForBitLikeACopyPerRank) {
  const SharedCase c = GetParam();
  auto cfg = base_config(c.stage, c.world, kGlobal, /*accum=*/2);
  cfg.bf16 = c.bf16;
  cfg.optimizer.state_dtype = c.state_dtype;
  if (c.offload_dpu) {
    cfg.zero.offload_optimizer.device = "cpu";
    cfg.zero.offload_optimizer.delayed_param_update = true;
    cfg.zero.offload_optimizer.dpu_warmup_steps = 2;
  }
  cfg.zero.host_shared_params = true;
  const TrainedRun shared = train(cfg, c.world);
  cfg.zero.host_shared_params = false;
  const TrainedRun own = train(cfg, c.world);
  EXPECT_EQ(shared.losses, own.losses);
  const size_t element = c.bf16 ? 2 : 4;
  for (int r = 0; r < c.world; ++r) {
    const auto i = static_cast<size_t>(r);
    EXPECT_TRUE(torch::equal(shared.params[i], own.params[i])) << "rank " << r;
    EXPECT_TRUE(torch::equal(shared.params[i], shared.params[0])) << "rank " << r;
    EXPECT_GE(shared.shared_bytes[i], element * static_cast<size_t>(shared.params[i].numel()));
    EXPECT_EQ(own.shared_bytes[i], 0u) << "rank " << r;
    // 16-bit parameters without the delayed update: the optimizer writes into the shared
    // copy, so no rank keeps a 16-bit shard (the delayed update keeps its own output).
    const size_t shard16 = c.bf16 && !c.offload_dpu ? 2 * static_cast<size_t>(own.shard[i]) : 0;
    EXPECT_EQ(own.buffers[i] - shared.buffers[i], shard16) << "rank " << r;
  }
  // The run must have learned something, or equal parameters would prove nothing.
  EXPECT_FALSE(torch::equal(shared.params[0], flatten_params(*make_model(kSeed))));
}

INSTANTIATE_TEST_SUITE_P(
    StagesWorldsDtypes, HostSharedParams,
    ::testing::Values(SharedCase{1, 2, false, false}, SharedCase{2, 3, false, false},
                      SharedCase{1, 3, true, false}, SharedCase{2, 2, true, false},
                      SharedCase{2, 3, true, true}, SharedCase{1, 2, false, true},
                      SharedCase{2, 3, true, false, "int8"},
                      SharedCase{1, 2, true, false, "bf16"}));

// The shared-memory transport, except that the parameters' segment cannot be had (as with a
// /dev/shm too small for them): every other call goes to the real communicator.
class NoRoomForParams final : public dist::Comm {
 public:
  explicit NoRoomForParams(dist::CommPtr inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  dist::WorkPtr all_reduce_sum(torch::Tensor t) override { return inner_->all_reduce_sum(t); }
  dist::WorkPtr reduce_scatter_sum(torch::Tensor in, torch::Tensor out) override {
    return inner_->reduce_scatter_sum(in, out);
  }
  dist::WorkPtr reduce_scatter_sum_v(torch::Tensor in, std::vector<int64_t> splits,
                                     torch::Tensor out) override {
    return inner_->reduce_scatter_sum_v(in, std::move(splits), out);
  }
  dist::WorkPtr all_gather(torch::Tensor in, torch::Tensor out) override {
    return inner_->all_gather(in, out);
  }
  dist::WorkPtr broadcast(torch::Tensor t, int root) override { return inner_->broadcast(t, root); }
  void barrier() override { inner_->barrier(); }
  torch::Tensor shared_tensor(int64_t, torch::ScalarType, std::string* why_not) override {
    *why_not = "no room in /dev/shm (test)";
    return {};
  }
  std::string backend() const override { return inner_->backend(); }

 private:
  dist::CommPtr inner_;
};

TEST(HostSharedParamsMemory, WithoutRoomEachRankKeepsACopySaysSoAndTrainsAlike) {
  const int world = 2;
  auto cfg = base_config(2, world, kGlobal, /*accum=*/1);
  cfg.bf16 = true;
  const TrainedRun shared = train(cfg, world);
  ::testing::internal::CaptureStderr();
  const TrainedRun fallback =
      train(cfg, world, [](dist::CommPtr c) { return std::make_shared<NoRoomForParams>(c); });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("zoff: one copy of the parameters per host is not possible (no room in "
                     "/dev/shm (test)): each rank keeps its own"),
            std::string::npos)
      << err;
  EXPECT_EQ(fallback.losses, shared.losses);
  for (int r = 0; r < world; ++r) {
    const auto i = static_cast<size_t>(r);
    EXPECT_TRUE(torch::equal(fallback.params[i], shared.params[i])) << "rank " << r;
    EXPECT_EQ(fallback.shared_bytes[i], 0u) << "rank " << r;
    EXPECT_GT(shared.shared_bytes[i], 0u) << "rank " << r;
  }
}

// One copy, not copies kept equal: a value one rank writes is what every other rank reads.
// With the key off each rank keeps its own (and stage 0 always does).
TEST(HostSharedParamsMemory, AWriteOnOneRankIsSeenByEveryRankOnlyWhenShared) {
  const int world = 3;
  for (int stage : {0, 2}) {
    for (bool shared : {true, false}) {
      auto cfg = base_config(stage, world, kGlobal, 1);
      cfg.zero.host_shared_params = shared;
      std::vector<testing::TinyMlp> models;
      for (int r = 0; r < world; ++r) models.push_back(make_model(kSeed));
      testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
        auto model = models[static_cast<size_t>(rank)];
        ZeroEngine engine(model.ptr(), cfg, comm);
        torch::NoGradGuard no_grad;
        comm->barrier();
        if (rank == 0) model->fc3->bias[1].fill_(42.0);  // another rank's piece
        comm->barrier();
        const bool one_copy = shared && stage > 0;
        EXPECT_EQ(model->fc3->bias[1].item<float>() == 42.0f, rank == 0 || one_copy)
            << "stage " << stage << " shared " << shared << " rank " << rank;
        comm->barrier();  // nobody leaves (and unmaps) before every rank has read
      });
    }
  }
}

}  // namespace
}  // namespace zoff::engine::host_shared_params_test
