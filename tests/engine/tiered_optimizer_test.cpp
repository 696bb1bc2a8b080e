// TieredOptimizer: a step streamed from a tier in sub-groups equals the in-memory fused step bit
// for bit.
#include "zoff/engine/tiered_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "offload/offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/io_faults.h"
#include "zoff/optim/shard_optimizer.h"

namespace zoff::engine {
namespace {

// A prime number of elements, so the last sub-group and the last 4 KiB block are partial.
constexpr size_t kNumel = 10007;
constexpr int64_t kSubGroup = 2048;  // elements: 5 sub-groups for kNumel
constexpr int kSteps = 3;

std::vector<float> randn(size_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto t = torch::randn({static_cast<int64_t>(n)});
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + n);
}

// Tier files go on the real disk (O_DIRECT works there).
using ScratchDir = offload::testing::TempDir;

optim::OptimizerOptions options_for(const std::string& type) {
  optim::OptimizerOptions o;
  o.type = type;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  if (type == "sgd") o.momentum = 0.9;
  if (type == "adagrad") o.initial_accumulator_value = 0.1;
  return o;
}

struct Outcome {
  std::vector<float> params;
  std::vector<uint16_t> out16;
  std::vector<std::vector<float>> states;
};

Outcome in_memory(const optim::OptimizerOptions& o) {
  auto opt = optim::make_shard_optimizer(o, kNumel, optim::OptimizerBackend::kFused, 1);
  Outcome r{randn(kNumel, 1), std::vector<uint16_t>(kNumel), {}};
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    opt->step(r.params.data(), g.data(), 1e-2 * (s + 1), optim::CopyOut::kBf16, r.out16.data());
  }
  for (auto& [name, ptr] : opt->state_buffers()) r.states.emplace_back(ptr, ptr + kNumel);
  return r;
}

Outcome tiered(offload::Tier& tier, const optim::OptimizerOptions& o, int64_t buffer_count) {
  TieredOptimizer opt(tier, o, 1, kNumel, {kSubGroup, buffer_count});
  Outcome r{randn(kNumel, 1), std::vector<uint16_t>(kNumel), {}};
  opt.append_master(0, r.params.data(), 5);  // in pieces of odd sizes, as units come
  opt.append_master(5, r.params.data() + 5, kNumel - 5);
  opt.finish_master();
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    opt.step(g.data(), 1e-2 * (s + 1), optim::CopyOut::kBf16, r.out16.data(), nullptr);
  }
  EXPECT_EQ(opt.optimizer().step_count(), kSteps);
  opt.read(0, 0, kNumel, r.params.data());
  // state_buffers() is a map (sorted by name), as in_memory() lists them.
  std::vector<std::pair<std::string, size_t>> names;
  for (size_t i = 1; i < opt.region_names().size(); ++i)
    names.emplace_back(opt.region_names()[i], i);
  std::sort(names.begin(), names.end());
  for (auto& [name, i] : names) {
    r.states.emplace_back(kNumel);
    opt.read(i, 0, kNumel, r.states.back().data());
  }
  return r;
}

void expect_same(const Outcome& want, const Outcome& got) {
  ASSERT_EQ(want.states.size(), got.states.size());
  EXPECT_EQ(0, std::memcmp(want.params.data(), got.params.data(), kNumel * sizeof(float)));
  EXPECT_EQ(want.out16, got.out16);
  for (size_t i = 0; i < want.states.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(want.states[i].data(), got.states[i].data(), kNumel * sizeof(float)))
        << "state " << i;
  }
}

class TieredOptimizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TieredOptimizerTest, NvmeStepIsBitwiseTheInMemoryStepForEveryPipelineDepth) {
  const auto o = options_for(GetParam());
  const Outcome want = in_memory(o);
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "test", offload::AioOptions{});
  const int64_t per_group = GetParam() == "adamw" || GetParam() == "adam" ? 3 : 2;
  for (int64_t slots : {1, 2, 3, 4}) {
    SCOPED_TRACE("slots = " + std::to_string(slots));
    auto t = offload::make_nvme_tier(dir.path(), "test_s" + std::to_string(slots), {});
    expect_same(want, tiered(*t, o, slots * per_group));
  }
  expect_same(want, tiered(*tier, o, 0));  // the automatic buffer count
}

TEST_P(TieredOptimizerTest, HostTierStepIsBitwiseTheInMemoryStep) {
  const auto o = options_for(GetParam());
  auto tier = offload::make_host_tier(false);
  expect_same(in_memory(o), tiered(*tier, o, 0));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TieredOptimizerTest,
                         ::testing::Values("adamw", "adam", "sgd", "adagrad"));

TEST(TieredOptimizer, ThreadPoolBackendGivesTheSameStep) {
  const auto o = options_for("adamw");
  ScratchDir dir;
  offload::AioOptions aio;
  aio.backend = offload::IoBackend::kThreads;
  aio.thread_count = 2;
  auto tier = offload::make_nvme_tier(dir.path(), "threads", aio);
  expect_same(in_memory(o), tiered(*tier, o, 0));
}

TEST(TieredOptimizer, RangesOfAnyOffsetAndSizeRoundTrip) {
  auto tier = offload::make_host_tier(false);
  ScratchDir dir;
  auto nvme = offload::make_nvme_tier(dir.path(), "ranges", {});
  for (offload::Tier* t : {tier.get(), nvme.get()}) {
    TieredOptimizer opt(*t, options_for("adamw"), 1, kNumel, {kSubGroup, 0});
    auto values = randn(kNumel, 7);
    opt.append_master(0, values.data(), kNumel);
    opt.finish_master();
    auto patch = randn(3001, 8);
    opt.write(2, 2047, 3001, patch.data());  // straddles two sub-group boundaries
    std::vector<float> got(3001);
    opt.read(2, 2047, 3001, got.data());
    EXPECT_EQ(patch, got);
    std::vector<float> zeros(2047), head(2047);
    opt.read(2, 0, 2047, head.data());  // untouched by the patch
    EXPECT_EQ(zeros, head);
  }
}

TEST(TieredOptimizer, TooFewBuffersAreRefusedNamingTheKey) {
  auto tier = offload::make_host_tier(false);
  try {
    TieredOptimizer opt(*tier, options_for("adamw"), 1, kNumel, {kSubGroup, 2});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("buffer_count = 2"), std::string::npos) << e.what();
  }
}

TEST(TieredOptimizer, MasterOfTheWrongSizeIsRefused) {
  auto tier = offload::make_host_tier(false);
  TieredOptimizer opt(*tier, options_for("adamw"), 1, kNumel, {kSubGroup, 0});
  auto values = randn(kNumel, 7);
  EXPECT_THROW(opt.append_master(1, values.data(), 2), Error);  // out of order
  opt.append_master(0, values.data(), kNumel - 1);
  EXPECT_THROW(opt.finish_master(), Error);
  EXPECT_THROW(opt.append_master(kNumel - 1, values.data(), 2), Error);
}

TEST(TieredOptimizer, AnIoErrorMidStepNamesTheFileAndDoesNotCountTheStep) {
  const auto o = options_for("adamw");
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "fault", {});
  TieredOptimizer opt(*tier, o, 1, kNumel, {kSubGroup, 0});
  auto values = randn(kNumel, 1);
  opt.append_master(0, values.data(), kNumel);
  opt.finish_master();
  auto g = randn(kNumel, 2);
  offload::set_io_fault_hook(
      [](offload::IoOp op, const std::string& path, uint64_t offset, size_t) -> int64_t {
        return op == offload::IoOp::kWrite && path.find("exp_avg_sq") != std::string::npos &&
                       offset >= 8192
                   ? -EIO
                   : 0;
      });
  try {
    opt.step(g.data(), 1e-2, optim::CopyOut::kNone, nullptr, nullptr);
    offload::set_io_fault_hook({});
    FAIL() << "no error";
  } catch (const Error& e) {
    offload::set_io_fault_hook({});
    const std::string what = e.what();
    EXPECT_NE(what.find("exp_avg_sq"), std::string::npos) << what;
    EXPECT_NE(what.find("Input/output error"), std::string::npos) << what;
  }
  EXPECT_EQ(opt.optimizer().step_count(), 0);
}

}  // namespace
}  // namespace zoff::engine
