// TieredOptimizer with the split master: the master on disk is its bf16 copy plus a 16-bit
// extension; steps, checkpoints' ranges and the output region give what the 4-byte master
// gives, apart from the odd ties the split master settles.
#include <c10/util/BFloat16.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <string>
#include <vector>

#include "offload/offload_test_support.h"
#include "zoff/core/error.h"
#include "zoff/engine/tiered_optimizer.h"
#include "zoff/optim/split_master.h"

namespace zoff::engine::tiered_split_master_test {
namespace {

// A prime number of elements, so the last sub-group and the last 4 KiB block are partial.
constexpr size_t kNumel = 10007;
constexpr int64_t kSubGroup = 4096;  // elements: 3 sub-groups
constexpr int kSteps = 4;
// Over kSteps x kNumel random Adam updates an odd tie is expected ~0.3 times (1 in 2^17),
// each moving one element by one ulp: at most this many elements may differ from the
// 4-byte master's, by at most kTieUlps ulps.
constexpr int kMaxTiedElements = 4;
constexpr uint32_t kTieUlps = 4;

using ScratchDir = offload::testing::TempDir;

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::vector<float> settled_randn(size_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto t = torch::randn({static_cast<int64_t>(n)});
  std::vector<float> v(t.data_ptr<float>(), t.data_ptr<float>() + n);
  optim::split_master_settle(v.data(), n);
  return v;
}

std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = c10::BFloat16(v[i]).x;
  return out;
}

optim::OptimizerOptions adamw(const std::string& states) {
  optim::OptimizerOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.state_dtype = states;
  return o;
}

SubGroupOptions groups(bool split) {
  SubGroupOptions s;
  s.sub_group_elems = kSubGroup;
  s.split_master = split;
  return s;
}

struct Outcome {
  std::vector<float> master;
  std::vector<uint16_t> copy;
  size_t master_disk_bytes = 0;  // the master's region
};

// kSteps AdamW steps from the same start: the 4-byte master (split = false) or the split
// one, its copy in memory or (out_region) in a region of a tier of its own.
Outcome run(offload::Tier& tier, const optim::OptimizerOptions& o, bool split, bool out_region) {
  TieredOptimizer opt(tier, o, 1, kNumel, groups(split));
  Outcome r{settled_randn(kNumel, 1), {}};
  r.copy = bf16_of(r.master);
  auto host = offload::make_host_tier(false);
  std::unique_ptr<offload::TierRegion> region;
  if (out_region) {
    region = host->allocate("params", kNumel * 2);
    std::memcpy(region->host_data(), r.copy.data(), kNumel * 2);
    opt.set_output_region(region.get(), 2);
  } else if (split) {
    opt.set_split_copy(r.copy.data());
  }
  opt.append_master(0, r.master.data(), kNumel);
  opt.finish_master();
  for (int s = 0; s < kSteps; ++s) {
    torch::manual_seed(100 + s);
    auto g = torch::randn({static_cast<int64_t>(kNumel)});
    opt.step(g.data_ptr<float>(), 1e-2 * (s + 1), optim::CopyOut::kBf16,
             out_region ? nullptr : r.copy.data(), nullptr);
  }
  opt.read(0, 0, kNumel, r.master.data());
  r.master_disk_bytes = opt.disk_bytes() - opt.state_disk_bytes();
  if (out_region) std::memcpy(r.copy.data(), region->host_data(), kNumel * 2);
  return r;
}

// Elements whose master differs (each by at most kTieUlps ulps), their copies the rounding
// of the masters either way.
int expect_close(const Outcome& want, const Outcome& got) {
  int differ = 0;
  for (size_t i = 0; i < kNumel; ++i) {
    EXPECT_EQ(got.copy[i], c10::BFloat16(got.master[i]).x) << i;
    if (bits(want.master[i]) == bits(got.master[i])) {
      EXPECT_EQ(want.copy[i], got.copy[i]) << i;
      continue;
    }
    ++differ;
    const int64_t ulps = static_cast<int64_t>(bits(want.master[i])) - bits(got.master[i]);
    EXPECT_LE(std::abs(ulps), kTieUlps) << "element " << i;
  }
  EXPECT_LE(differ, kMaxTiedElements);
  return differ;
}

class SplitMasterStates : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitMasterStates, StepMatchesTheFourByteMasterAndTheCopyIsItsRounding) {
  const auto o = adamw(GetParam());
  ScratchDir dir;
  auto a = offload::make_nvme_tier(dir.path(), "full", {});
  auto b = offload::make_nvme_tier(dir.path(), "split", {});
  auto c = offload::make_nvme_tier(dir.path(), "split_region", {});
  const Outcome want = run(*a, o, false, false);
  const Outcome in_memory = run(*b, o, true, false);
  const Outcome in_region = run(*c, o, true, true);
  std::printf("%s states: %d of %zu masters differ after %d steps\n", GetParam().c_str(),
              expect_close(want, in_memory), kNumel, kSteps);
  // Where the copy lives does not change a bit.
  EXPECT_EQ(0, std::memcmp(in_memory.master.data(), in_region.master.data(), kNumel * 4));
  EXPECT_EQ(in_memory.copy, in_region.copy);
  // The master's region holds the extensions: 2 bytes per element, not 4.
  EXPECT_EQ(in_memory.master_disk_bytes, kNumel * 2);
  EXPECT_EQ(want.master_disk_bytes, kNumel * 4);
}

INSTANTIATE_TEST_SUITE_P(StateDtypes, SplitMasterStates, ::testing::Values("fp32", "bf16", "int8"));

// SGD with lr 1 sets every master to the target t exactly (p - (p - t) is exact when t is
// within a factor 2 of p): every third target an odd tie, which the split master settles one
// ulp away from zero and the 4-byte master keeps.
TEST(SplitMaster, OddTiesAfterAStepAreSettledOneUlpTowardZero) {
  optim::OptimizerOptions o;
  o.type = "sgd";
  o.lr = 1.0;
  auto start = settled_randn(kNumel, 3);
  std::vector<float> target(kNumel), grads(kNumel);
  for (size_t i = 0; i < kNumel; ++i) {
    start[i] = 1.5f + 0.25f * std::tanh(start[i]);
    optim::split_master_settle(&start[i], 1);
    const uint32_t odd_tie =
        (bits(1.25f) & ~0x1FFFFu) + (static_cast<uint32_t>(i) << 17) % 0x400000u + 0x18000u;
    target[i] = i % 3 == 0 ? from_bits(odd_tie) : start[i] * 1.0625f;
    grads[i] = start[i] - target[i];
  }
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "ties", {});
  TieredOptimizer opt(*tier, o, 1, kNumel, groups(true));
  std::vector<uint16_t> copy = bf16_of(start);
  opt.set_split_copy(copy.data());
  opt.append_master(0, start.data(), kNumel);
  opt.finish_master();
  opt.step(grads.data(), 1.0, optim::CopyOut::kBf16, copy.data(), nullptr);
  std::vector<float> master(kNumel);
  opt.read(0, 0, kNumel, master.data());
  size_t settled = 0;
  for (size_t i = 0; i < kNumel; ++i) {
    const uint32_t want = optim::split_master_settle(bits(target[i]));
    settled += want != bits(target[i]);
    ASSERT_EQ(bits(master[i]), want) << i;
    ASSERT_EQ(copy[i], c10::BFloat16(master[i]).x) << i;
  }
  EXPECT_EQ(settled, (kNumel + 2) / 3);
}

// Checkpoints read and write the master as fp32: written values are settled, split into
// extension and copy (in memory or in the output region), and read back joined.
TEST(SplitMaster, MasterRangesRoundTripThroughCopyAndExtension) {
  ScratchDir dir;
  auto tier = offload::make_nvme_tier(dir.path(), "ranges", {});
  auto host = offload::make_host_tier(false);
  for (bool out_region : {false, true}) {
    SCOPED_TRACE(out_region ? "copy in a region" : "copy in memory");
    TieredOptimizer opt(*tier, adamw("fp32"), 1, kNumel, groups(true));
    std::vector<float> values = settled_randn(kNumel, 7);
    std::vector<uint16_t> copy = bf16_of(values);
    std::unique_ptr<offload::TierRegion> region;
    if (out_region) {
      region = host->allocate("params_" + std::to_string(out_region), kNumel * 2);
      std::memcpy(region->host_data(), copy.data(), kNumel * 2);
      opt.set_output_region(region.get(), 2);
    } else {
      opt.set_split_copy(copy.data());
    }
    opt.append_master(0, values.data(), kNumel);
    opt.finish_master();
    std::vector<float> patch(5001);
    torch::manual_seed(8);
    auto r = torch::randn({5001});
    std::memcpy(patch.data(), r.data_ptr<float>(), patch.size() * 4);
    patch[10] = from_bits(0x3F818000u);              // an odd tie: settled on the way in
    opt.write(0, 4095, patch.size(), patch.data());  // straddles two sub-group boundaries
    std::vector<float> got(patch.size()), head(4095);
    opt.read(0, 4095, patch.size(), got.data());
    optim::split_master_settle(patch.data(), patch.size());
    EXPECT_EQ(0, std::memcmp(patch.data(), got.data(), patch.size() * 4));
    EXPECT_EQ(bits(got[10]), 0x3F818001u);
    opt.read(0, 0, 4095, head.data());  // untouched by the patch
    EXPECT_EQ(0, std::memcmp(values.data(), head.data(), head.size() * 4));
    const uint16_t* c = out_region ? static_cast<uint16_t*>(region->host_data()) : copy.data();
    for (size_t i = 0; i < patch.size(); ++i) {
      ASSERT_EQ(c[4095 + i], c10::BFloat16(patch[i]).x) << i;
    }
  }
}

TEST(SplitMaster, BadUseIsRefused) {
  auto tier = offload::make_host_tier(false);
  TieredOptimizer opt(*tier, adamw("fp32"), 1, kNumel, groups(true));
  std::vector<float> values = settled_randn(kNumel, 9);
  values[5] = from_bits(0x3F818000u);  // an odd tie nobody settled
  try {
    opt.append_master(0, values.data(), kNumel);
    FAIL() << "an unsettled master was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not settled"), std::string::npos) << e.what();
  }
  std::vector<float> out(10);
  EXPECT_THROW(opt.read(0, 0, 10, out.data()), Error);  // no copy bound: nothing to join
  std::vector<uint16_t> copy(kNumel), other(kNumel);
  opt.set_split_copy(copy.data());
  std::vector<float> g(kNumel);
  EXPECT_THROW(opt.step(g.data(), 1e-3, optim::CopyOut::kFp16, copy.data(), nullptr), Error);
  EXPECT_THROW(opt.step(g.data(), 1e-3, optim::CopyOut::kBf16, other.data(), nullptr), Error);
  EXPECT_EQ(opt.optimizer().step_count(), 0);
  auto region = tier->allocate("params32", kNumel * 4);
  EXPECT_THROW(opt.set_output_region(region.get(), 4), Error);  // the copy is bf16
}

}  // namespace
}  // namespace zoff::engine::tiered_split_master_test
