// TieredOptimizer: a step streamed from a tier in sub-groups equals the in-memory fused step bit
// for bit.
#include "zoff/engine/tiered_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "offload/offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/offload/io_faults.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::engine::tiered_optimizer_test {
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

// The master's values, seed 1 (in_memory()'s start), all at once.
void fill_master(TieredOptimizer& opt) {
  auto values = randn(kNumel, 1);
  opt.append_master(0, values.data(), kNumel);
  opt.finish_master();
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

// The master and the states as the steps left them, into r (states sorted by name:
// state_buffers() is a map, as in_memory() lists them).
void read_back(TieredOptimizer& opt, Outcome* r) {
  opt.read(0, 0, kNumel, r->params.data());
  std::vector<std::pair<std::string, size_t>> names;
  for (size_t i = 1; i < opt.region_names().size(); ++i)
    names.emplace_back(opt.region_names()[i], i);
  std::sort(names.begin(), names.end());
  for (auto& [name, i] : names) {
    r->states.emplace_back(kNumel);
    opt.read(i, 0, kNumel, r->states.back().data());
  }
}

// `prefetch`: each step's first sub-groups read ahead first (twice before the first step,
// as when an fp16 step was skipped in between).
Outcome tiered(offload::Tier& tier, const optim::OptimizerOptions& o, int64_t buffer_count,
               bool prefetch = false) {
  TieredOptimizer opt(tier, o, 1, kNumel, {kSubGroup, buffer_count});
  Outcome r{randn(kNumel, 1), std::vector<uint16_t>(kNumel), {}};
  opt.append_master(0, r.params.data(), 5);  // in pieces of odd sizes, as units come
  opt.append_master(5, r.params.data() + 5, kNumel - 5);
  opt.finish_master();
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    if (prefetch) opt.prefetch();
    if (prefetch && s == 0) opt.prefetch();
    opt.step(g.data(), 1e-2 * (s + 1), optim::CopyOut::kBf16, r.out16.data(), nullptr);
  }
  EXPECT_EQ(opt.optimizer().step_count(), kSteps);
  read_back(opt, &r);
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

// Compressed states (bf16 bits, int8 codes and block scales) as stored after kSteps steps.
struct StoredOutcome {
  std::vector<float> params;
  std::vector<uint16_t> out16;
  std::vector<std::vector<uint8_t>> states;  // exp_avg, exp_avg_sq: stored bytes
  std::vector<std::vector<float>> scales;    // int8 only
};

StoredOutcome in_memory_stored(const optim::OptimizerOptions& o) {
  auto opt = optim::make_shard_optimizer(o, kNumel, optim::OptimizerBackend::kFused, 1);
  StoredOutcome r{randn(kNumel, 1), std::vector<uint16_t>(kNumel), {}, {}};
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    opt->step(r.params.data(), g.data(), 1e-2 * (s + 1), optim::CopyOut::kBf16, r.out16.data());
  }
  for (auto& [name, st] : opt->stored_state_buffers()) {  // sorted by name, as region order
    const auto* bytes = static_cast<const uint8_t*>(st.data);
    r.states.emplace_back(bytes, bytes + st.bytes);
    if (st.scales != nullptr) r.scales.emplace_back(st.scales, st.scales + st.num_scales);
  }
  return r;
}

StoredOutcome tiered_stored(offload::Tier& tier, const optim::OptimizerOptions& o,
                            int64_t buffer_count) {
  TieredOptimizer opt(tier, o, 1, kNumel, {kSubGroup, buffer_count});
  EXPECT_EQ(opt.sub_group_elems() % static_cast<int64_t>(optim::kStateBlock), 0);
  StoredOutcome r{randn(kNumel, 1), std::vector<uint16_t>(kNumel), {}, {}};
  opt.append_master(0, r.params.data(), kNumel);
  opt.finish_master();
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    opt.step(g.data(), 1e-2 * (s + 1), optim::CopyOut::kBf16, r.out16.data(), nullptr);
  }
  opt.read(0, 0, kNumel, r.params.data());
  for (size_t i = 1; i < opt.region_names().size(); ++i) {
    r.states.emplace_back(kNumel * opt.region_element_bytes(i));
    opt.read(i, 0, kNumel, r.states.back().data());
    if (opt.has_scales()) {
      r.scales.emplace_back(opt.scales(i - 1), opt.scales(i - 1) + opt.num_scales());
    }
  }
  // The regions hold the stored bytes: n x (2 | 1) per state, the master n x 4.
  EXPECT_EQ(opt.state_disk_bytes(), 2 * kNumel * opt.region_element_bytes(1));
  return r;
}

void expect_same_stored(const StoredOutcome& want, const StoredOutcome& got) {
  EXPECT_EQ(0, std::memcmp(want.params.data(), got.params.data(), kNumel * sizeof(float)));
  EXPECT_EQ(want.out16, got.out16);
  EXPECT_EQ(want.states, got.states);
  ASSERT_EQ(want.scales.size(), got.scales.size());
  for (size_t i = 0; i < want.scales.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(want.scales[i].data(), got.scales[i].data(),
                             want.scales[i].size() * sizeof(float)))
        << "scales of state " << i;
  }
}

class TieredCompressedStates : public ::testing::TestWithParam<std::string> {};

TEST_P(TieredCompressedStates, NvmeStepIsBitwiseTheInMemoryCompressedStep) {
  auto o = options_for("adamw");
  o.state_dtype = GetParam();
  const StoredOutcome want = in_memory_stored(o);
  ASSERT_EQ(want.scales.size(), GetParam() == "int8" ? 2u : 0u);
  ScratchDir dir;
  for (int64_t slots : {1, 2, 3}) {
    SCOPED_TRACE("slots = " + std::to_string(slots));
    auto t = offload::make_nvme_tier(dir.path(), "c_s" + std::to_string(slots), {});
    expect_same_stored(want, tiered_stored(*t, o, slots * 3));
  }
  auto host = offload::make_host_tier(false);
  expect_same_stored(want, tiered_stored(*host, o, 0));
}

// The tier files shrink with the state dtype: 4 / 2 / 1 bytes per element per state (each
// file a whole number of 4 KiB blocks); int8 scales stay in host memory.
TEST_P(TieredCompressedStates, StateFilesShrink) {
  auto o = options_for("adamw");
  o.state_dtype = GetParam();
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "size", {});
  TieredOptimizer opt(*tier, o, 1, kNumel, {kSubGroup, 0});
  const size_t elem = GetParam() == "bf16" ? 2 : 1;
  auto file_bytes = [&](const std::string& region) {
    return std::filesystem::file_size(dir.path() + "/size." + region + ".swp");
  };
  auto blocks = [](size_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  EXPECT_EQ(file_bytes("master"), blocks(kNumel * 4));
  EXPECT_EQ(file_bytes("exp_avg"), blocks(kNumel * elem));
  EXPECT_EQ(file_bytes("exp_avg_sq"), blocks(kNumel * elem));
  std::printf("%s states, %zu elements: master file %ju bytes, exp_avg file %ju bytes\n",
              GetParam().c_str(), kNumel, static_cast<uintmax_t>(file_bytes("master")),
              static_cast<uintmax_t>(file_bytes("exp_avg")));
}

INSTANTIATE_TEST_SUITE_P(StateDtypes, TieredCompressedStates, ::testing::Values("bf16", "int8"));

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

TEST(TieredOptimizer, PrefetchedStepsAreBitwiseTheInMemorySteps) {
  const auto o = options_for("adamw");
  const Outcome want = in_memory(o);
  ScratchDir dir;
  for (int64_t slots : {1, 3, 8}) {  // fewer, as many as and more slots than sub-groups
    SCOPED_TRACE("slots = " + std::to_string(slots));
    auto tier = offload::make_nvme_tier(dir.path(), "pre" + std::to_string(slots), {});
    expect_same(want, tiered(*tier, o, slots * 3, /*prefetch=*/true));
  }
  auto host = offload::make_host_tier(false);
  expect_same(want, tiered(*host, o, 0, /*prefetch=*/true));
}

// prefetch() reads the first `slots` sub-groups' master before any step, and the step does
// not read them again: the master's file is read once in all. (The reads are issued from
// the tier's I/O thread, so they are counted, not ordered.)
TEST(TieredOptimizer, PrefetchReadsAheadAndTheStepDoesNotReadItAgain) {
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "ahead", {});
  TieredOptimizer opt(*tier, options_for("adamw"), 1, kNumel, {kSubGroup, 0});  // 3 slots
  fill_master(opt);
  ASSERT_EQ(opt.groups(), 5u);
  ASSERT_EQ(opt.slots(), 3);
  const uint64_t ahead_bytes = 3 * kSubGroup * sizeof(float);
  std::atomic<uint64_t> early{0}, late{0};  // master bytes read below / from sub-group 3
  offload::set_io_fault_hook(
      [&](offload::IoOp op, const std::string& path, uint64_t offset, size_t bytes) -> int64_t {
        if (op == offload::IoOp::kRead && path.find("master") != std::string::npos) {
          (offset < ahead_bytes ? early : late) += bytes;
        }
        return 0;
      });
  opt.prefetch();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (early.load() < ahead_bytes && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(early.load(), ahead_bytes);  // read ahead, before any step
  EXPECT_EQ(late.load(), 0u);
  auto g = randn(kNumel, 2);
  opt.step(g.data(), 1e-2, optim::CopyOut::kNone, nullptr, nullptr);
  offload::set_io_fault_hook({});
  EXPECT_EQ(early.load(), ahead_bytes);  // not again
  EXPECT_GE(late.load(), (kNumel - 3 * kSubGroup) * sizeof(float));
}

// A range written between the read-ahead and the step (a checkpoint loaded) is what the
// step updates, not the stale copy read before it.
TEST(TieredOptimizer, AWriteAfterAPrefetchIsWhatTheStepUpdates) {
  const auto o = options_for("adamw");
  ScratchDir dir;
  std::vector<std::vector<float>> got;
  for (bool prefetch : {false, true}) {
    auto tier = offload::make_nvme_tier(dir.path(), prefetch ? "stale" : "plain", {});
    TieredOptimizer opt(*tier, o, 1, kNumel, {kSubGroup, 0});
    auto values = randn(kNumel, 1);
    opt.append_master(0, values.data(), kNumel);
    opt.finish_master();
    if (prefetch) opt.prefetch();
    auto patch = randn(kNumel, 3);
    opt.write(0, 0, kNumel, patch.data());
    opt.write(1, 100, 3000, patch.data());
    auto g = randn(kNumel, 2);
    opt.step(g.data(), 1e-2, optim::CopyOut::kNone, nullptr, nullptr);
    got.emplace_back(kNumel);
    opt.read(0, 0, kNumel, got.back().data());
    got.emplace_back(kNumel);
    opt.read(1, 0, kNumel, got.back().data());
  }
  EXPECT_EQ(got[0], got[2]);  // master
  EXPECT_EQ(got[1], got[3]);  // exp_avg
}

TEST(TieredOptimizer, PrefetchDuringAStepIsRefused) {
  auto tier = offload::make_host_tier(false);
  TieredOptimizer opt(*tier, options_for("adamw"), 1, kNumel, {kSubGroup, 0});
  auto values = randn(kNumel, 1);
  opt.append_master(0, values.data(), kNumel);
  opt.finish_master();
  auto g = randn(kNumel, 2);
  opt.begin_step(g.data(), 1e-2, optim::CopyOut::kNone, nullptr, nullptr);
  EXPECT_THROW(opt.prefetch(), Error);
  opt.finish_step();
  EXPECT_EQ(opt.optimizer().step_count(), 1);
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

// The overlapped step, its sub-groups submitted in the given order each step (backward's
// order: the last sub-group first), as in_memory() steps them.
Outcome submitted_in_order(offload::Tier& tier, const optim::OptimizerOptions& o,
                           const std::vector<std::vector<size_t>>& orders) {
  TieredOptimizer opt(tier, o, 1, kNumel, {kSubGroup, 0});
  Outcome r{randn(kNumel, 1), std::vector<uint16_t>(kNumel), {}};
  opt.append_master(0, r.params.data(), kNumel);
  opt.finish_master();
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    opt.begin_step(g.data(), 1e-2 * (s + 1), optim::CopyOut::kBf16, r.out16.data(), nullptr);
    for (size_t group : orders.at(static_cast<size_t>(s))) opt.submit(group);
    opt.finish_step();
  }
  read_back(opt, &r);
  return r;
}

// Read ahead in the last step's order, right or wrong (the order changes), the steps are
// the in-memory steps bit for bit.
TEST(TieredOptimizer, StepsReadAheadInTheLastStepsOrderAreBitwiseTheInMemorySteps) {
  const auto o = options_for("adamw");
  const auto want = in_memory(o);
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "order", {});
  const std::vector<size_t> backward{4, 3, 2, 1, 0}, forward{0, 1, 2, 3, 4}, mixed{2, 0, 4, 1, 3};
  expect_same(want, submitted_in_order(*tier, o, {backward, backward, forward}));
  expect_same(want, submitted_in_order(*tier, o, {forward, mixed, backward}));
}

// A step begun and given no sub-group yet has already read the master of the sub-groups
// the last step took first (4, 3, 2: one per buffer set), and reads no master twice.
TEST(TieredOptimizer, TheStepReadsAheadTheSubGroupsTheLastStepTookFirst) {
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "ahead_order", {});
  TieredOptimizer opt(*tier, options_for("adamw"), 1, kNumel, {kSubGroup, 0});  // 3 slots
  fill_master(opt);
  ASSERT_EQ(opt.groups(), 5u);
  auto g = randn(kNumel, 2);
  opt.begin_step(g.data(), 1e-2, optim::CopyOut::kNone, nullptr, nullptr);
  for (size_t group : {4, 3, 2, 1, 0}) opt.submit(group);
  opt.finish_step();
  std::vector<std::atomic<int>> reads(opt.groups());
  offload::set_io_fault_hook(
      [&](offload::IoOp op, const std::string& path, uint64_t offset, size_t) -> int64_t {
        if (op == offload::IoOp::kRead && path.find("master") != std::string::npos) {
          ++reads.at(offset / (kSubGroup * sizeof(float)));
        }
        return 0;
      });
  opt.begin_step(g.data(), 1e-2, optim::CopyOut::kNone, nullptr, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((reads[2] == 0 || reads[3] == 0 || reads[4] == 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int before[] = {reads[0], reads[1], reads[2], reads[3], reads[4]};
  for (size_t group : {4, 3, 2, 1, 0}) opt.submit(group);
  opt.finish_step();
  offload::set_io_fault_hook({});
  EXPECT_EQ(before[0] + before[1], 0);  // not yet: no free buffer set for them
  EXPECT_GT(before[2] * before[3] * before[4], 0) << "nothing read ahead";
  for (size_t i = 0; i < reads.size(); ++i) EXPECT_GT(reads[i], 0) << "sub-group " << i;
  // A 4 KiB-aligned sub-group's master is read in one request of at most 1 MiB.
  for (size_t i = 0; i < reads.size(); ++i) EXPECT_EQ(reads[i], 1) << "sub-group " << i;
}

// Streamed gradients through a window of two buffers (each sub-group takes a buffer an earlier
// one left, unzeroed; the incomplete one holds its buffer until the step closes, the others
// share the second): a sub-group some of whose elements get no gradient in a step (a
// parameter no loss used) steps as if they were zero, bitwise the in-memory step given zeros
// there. Regression: the window zeroed every buffer it handed out (80 MB of memset per 20M
// sub-group on backward's thread); now only an incomplete sub-group's gaps are zeroed.
TEST(TieredOptimizer, StreamedGradientsMissingFromASubGroupCountAsZero) {
  const auto o = options_for("adamw");
  constexpr size_t kGapBegin = 2 * kSubGroup + 100, kGapEnd = 2 * kSubGroup + 300;
  auto want = randn(kNumel, 1);
  std::vector<uint16_t> want16(kNumel);
  auto mem = optim::make_shard_optimizer(o, kNumel, optim::OptimizerBackend::kFused, 1);
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "streamed", offload::AioOptions{});
  SubGroupOptions sg;
  sg.sub_group_elems = kSubGroup;
  sg.grads_streamed = true;
  sg.stream_buffers = 2;
  sg.timeout = std::chrono::seconds(60);
  TieredOptimizer opt(*tier, o, 1, kNumel, sg);
  fill_master(opt);
  std::vector<uint16_t> got16(kNumel);
  for (int s = 0; s < kSteps; ++s) {
    auto g = randn(kNumel, 100 + s);
    const bool gap = s > 0;  // step 0 fills the buffer with values a gap must not keep
    if (gap) std::fill(g.begin() + kGapBegin, g.begin() + kGapEnd, 0.0f);
    mem->step(want.data(), g.data(), 1e-2, optim::CopyOut::kBf16, want16.data());
    opt.begin_step(nullptr, 1e-2, optim::CopyOut::kBf16, got16.data(), nullptr);
    // In pieces of odd sizes, in order, skipping the gap.
    for (size_t at = 0; at < kNumel;) {
      const size_t n = std::min<size_t>(777, kNumel - at);
      if (gap && at < kGapEnd && at + n > kGapBegin) {
        if (at < kGapBegin) opt.accumulate_grads(at, g.data() + at, kGapBegin - at, true, 1);
        if (at + n > kGapEnd)
          opt.accumulate_grads(kGapEnd, g.data() + kGapEnd, at + n - kGapEnd, true, 1);
      } else {
        opt.accumulate_grads(at, g.data() + at, n, true, 1);
      }
      at += n;
    }
    opt.finish_step();
  }
  std::vector<float> got(kNumel);
  opt.read(0, 0, kNumel, got.data());
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), kNumel * sizeof(float)));
  EXPECT_EQ(want16, got16);
}

}  // namespace
}  // namespace zoff::engine::tiered_optimizer_test
