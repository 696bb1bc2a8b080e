// The host MasterStore: its master and states are regions of a host tier, stepped in place
// exactly as a ShardOptimizer over memory of its own steps, and they outlive nothing they serve.
#include "zoff/engine/master_store.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/offload/tier.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::engine {
namespace {

// Large enough that the master and the fp32 states are 2 MiB regions (mappings of their own),
// uneven so the last SIMD lanes and int8 blocks are partial.
constexpr size_t kNumel = (size_t{3} << 19) + 37;
constexpr int kSteps = 3;

config::Config adamw_config(const std::string& state_dtype) {
  config::Config c = config::parse_config(
      R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "state_dtype": ")" + state_dtype +
          R"(", "params": {"lr": 0.01, "weight_decay": 0.1}}})",
      1);
  return c;
}

std::vector<float> random_floats(size_t n, int seed) {
  torch::manual_seed(seed);
  auto t = torch::randn({static_cast<int64_t>(n)});
  return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + n);
}

class HostMasterStoreTest : public ::testing::TestWithParam<std::string> {};

// Same values as a ShardOptimizer owning its states, bit for bit, 16-bit copy included; the
// master and every state (int8 scales too) are regions of the host tier.
TEST_P(HostMasterStoreTest, StepsInPlaceLikeAnOptimizerOverItsOwnMemory) {
  const config::Config c = adamw_config(GetParam());
  MasterStoreOptions so;
  so.numel = kNumel;
  auto store = make_master_store({placement::Store::kHost, {}}, "zoff_rank0", c, so);
  ASSERT_TRUE(store->master().defined());

  auto reference = optim::make_shard_optimizer(c.optimizer, kNumel, optim::OptimizerBackend::kFused,
                                               /*threads=*/1);
  std::vector<float> ref_master = random_floats(kNumel, 1);
  store->fill(0, ref_master.data(), kNumel);
  store->finish_fill();
  std::vector<uint16_t> out(kNumel), ref_out(kNumel);
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<float> grads = random_floats(kNumel, 10 + s);
    StepOutput o;
    o.copy_out = optim::CopyOut::kBf16;
    o.out16 = out.data();
    store->step(grads.data(), 1e-2, o);
    reference->step(ref_master.data(), grads.data(), 1e-2, optim::CopyOut::kBf16, ref_out.data());
  }
  std::vector<float> master(kNumel);
  store->read_master(0, kNumel, master.data());
  EXPECT_EQ(std::memcmp(master.data(), ref_master.data(), kNumel * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(out.data(), ref_out.data(), kNumel * sizeof(uint16_t)), 0);
  auto stored = store->memory_optimizer()->stored_state_buffers();
  for (auto& [name, st] : reference->stored_state_buffers()) {
    ASSERT_EQ(stored.count(name), 1u) << name;
    EXPECT_EQ(std::memcmp(stored[name].data, st.data, st.bytes), 0) << name;
    EXPECT_EQ(std::memcmp(stored[name].scales, st.scales, st.num_scales * sizeof(float)), 0)
        << name;
  }
  // In the tier's memory: the master's region is a 2 MiB-aligned mapping (huge pages).
  EXPECT_EQ(reinterpret_cast<uintptr_t>(store->master().data_ptr()) % kHugePageBytes, 0u);
  const StoreBytes b = store->bytes();
  EXPECT_EQ(b.memory_master, kNumel * sizeof(float));
  EXPECT_EQ(b.memory_states, reference->state_bytes());
}

INSTANTIATE_TEST_SUITE_P(StateDtypes, HostMasterStoreTest,
                         ::testing::Values("fp32", "bf16", "int8"));

// A view of the master a caller keeps stays valid after the store is gone (its region lives
// as long as the tensor): reading it must neither crash nor change.
TEST(HostMasterStore, MasterViewOutlivesTheStore) {
  const config::Config c = adamw_config("fp32");
  MasterStoreOptions so;
  so.numel = kNumel;
  auto store = make_master_store({placement::Store::kHost, {}}, "zoff_rank0", c, so);
  const std::vector<float> values = random_floats(kNumel, 3);
  store->fill(0, values.data(), kNumel);
  torch::Tensor master = store->master();
  store.reset();
  EXPECT_EQ(std::memcmp(master.data_ptr<float>(), values.data(), kNumel * sizeof(float)), 0);
}

// The compute parameters as the master: stepped where they are, no master region of its own.
TEST(HostMasterStore, StepsTheParametersWhenTheyAreTheMaster) {
  const config::Config c = adamw_config("fp32");
  auto params = torch::randn({1000});
  const auto before = params.clone();
  MasterStoreOptions so;
  so.numel = 1000;
  so.params_master = params;
  auto store = make_master_store({placement::Store::kCompute, {}}, "zoff_rank0", c, so);
  EXPECT_TRUE(store->master().is_same(params));
  const std::vector<float> grads = random_floats(1000, 4);
  store->step(grads.data(), 1e-2, StepOutput{});
  EXPECT_FALSE(torch::equal(params, before));
}

// A master of the wrong size or dtype: one line naming the expected size.
TEST(HostMasterStore, RefusesAMasterThatDoesNotFit) {
  const config::Config c = adamw_config("fp32");
  MasterStoreOptions so;
  so.numel = 1000;
  so.params_master = torch::zeros({999});
  try {
    make_master_store({placement::Store::kHost, {}}, "zoff_rank0", c, so);
    FAIL() << "a 999-element master for 1000 elements was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1000 contiguous fp32 elements"), std::string::npos)
        << e.what();
  }
  so.params_master = torch::zeros({1000}, torch::kFloat64);
  EXPECT_THROW(make_master_store({placement::Store::kHost, {}}, "zoff_rank0", c, so), Error);
}

}  // namespace
}  // namespace zoff::engine
