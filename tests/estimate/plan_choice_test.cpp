// The planner that chooses: its candidates are planned as plan_run plans their configs, sorted
// cheapest first, and the choice is the cheapest that fits; sizes parse or are refused.
#include "zoff/estimate/plan_choice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "zoff/config/config.h"
#include "zoff/config/config_json.h"
#include "zoff/core/error.h"
#include "zoff/placement/placement.h"

namespace zoff::estimate {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

config::Config base_config(int world) {
  return config::parse_config(
      R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "bf16": {"enabled": true}})",
      world);
}

// A model of 8 units of 40M elements (320M parameters: states on disk save GBs); checkpointing
// keeps a quarter of the activations.
PlanModel model(bool checkpointing) {
  PlanModel m;
  m.unit_elems.assign(8, 40000000);
  m.activation_bytes = checkpointing ? 100000000 : 400000000;
  m.late_activation_bytes = checkpointing ? 20000000 : 0;
  return m;
}

TEST(PlanChoice, CandidatesArePlannedAsTheirConfigsAndSortedCheapestFirst) {
  for (const int world : {1, 3}) {
    const MachineBudget budget{64 * kGiB, 64 * kGiB};
    const auto c = plan_candidates(base_config(world), world, "/var/tmp/x", model, budget);
    // In memory: 3 state dtypes x checkpointing or not x the split master or not; on disk
    // (stage 2, stage 3 with the parameters), also x gradients in memory or streamed.
    ASSERT_EQ(c.size(), (world > 1 ? 2u : 1u) * 3u * 2u * 2u + 2u * 3u * 2u * 2u * 2u);
    for (size_t i = 0; i < c.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(c[i - 1].relative_step, c[i].relative_step) << c[i].name;
      }
      // The config written is the one planned, and the engine's rules accept it.
      const auto again = config::parse_config(config::normalized_config_json(c[i].config), world);
      const auto p = plan_run(again, world, model(c[i].spec.activation_checkpointing));
      EXPECT_EQ(c[i].ram_bytes, p.host_bytes * world) << c[i].name;
      EXPECT_EQ(c[i].disk_bytes, p.disk_bytes * world) << c[i].name;
      const auto place = placement::resolve(again, placement::PlacementContext{world});
      EXPECT_EQ(place.stage, c[i].spec.stage) << c[i].name;
      EXPECT_EQ(place.optimizer_on_disk(), c[i].spec.optimizer_on_disk) << c[i].name;
      EXPECT_EQ(place.params_on_disk(), c[i].spec.params_on_disk) << c[i].name;
      EXPECT_EQ(again.activation_checkpointing, c[i].spec.activation_checkpointing);
      EXPECT_EQ(place.split_master, c[i].spec.split_master) << c[i].name;
      EXPECT_EQ(
          placement::to_string(place.grads),
          placement::to_string(c[i].spec.gradients == "stream" ? placement::GradStore::kStreamed
                               : c[i].spec.gradients == "nvme" ? placement::GradStore::kDisk
                                                               : placement::GradStore::kMemory))
          << c[i].name;
      EXPECT_EQ(c[i].disk_bytes > 0, c[i].spec.optimizer_on_disk) << c[i].name;
    }
    // Everything fits 64 GiB: the cheapest is stage 2 with fp32 states in memory.
    const Candidate* chosen = cheapest_fitting(c);
    ASSERT_NE(chosen, nullptr);
    EXPECT_EQ(chosen, &c.front());
    EXPECT_EQ(chosen->name, "stage 2, optimizer cpu, fp32 states");
  }
}

TEST(PlanChoice, ChoosesTheCheapestThatFitsAndNothingWhenNothingDoes) {
  const auto all =
      plan_candidates(base_config(1), 1, "/var/tmp/x", model, MachineBudget{64 * kGiB, 64 * kGiB});
  // RAM just under what the in-memory fp32 candidate needs with its margin, no disk: a
  // compressed-state candidate.
  const auto fp32_need = static_cast<int64_t>(
      std::ceil(static_cast<double>(all.front().ram_bytes) / (1 - kRamMargin)));
  const MachineBudget tight{fp32_need - 1, 0};
  auto c = plan_candidates(base_config(1), 1, "/var/tmp/x", model, tight);
  const Candidate* chosen = cheapest_fitting(c);
  ASSERT_NE(chosen, nullptr);
  EXPECT_EQ(chosen->name, "stage 2, optimizer cpu, bf16 states");
  EXPECT_EQ(chosen->disk_bytes, 0);
  for (const auto& cand : c) {
    EXPECT_EQ(cand.fits, fits_budget(cand.ram_bytes, cand.disk_bytes, tight)) << cand.name;
    if (cand.spec.optimizer_on_disk) {
      EXPECT_FALSE(cand.fits) << cand.name;
    }
  }
  // Less RAM than any in-memory candidate, disk enough: the states go to disk.
  int64_t least_memory_ram = INT64_MAX, least_ram = INT64_MAX;
  for (const auto& cand : all) {
    least_ram = std::min(least_ram, cand.ram_bytes);
    if (!cand.spec.optimizer_on_disk) least_memory_ram = std::min(least_memory_ram, cand.ram_bytes);
  }
  c = plan_candidates(base_config(1), 1, "/var/tmp/x", model,
                      MachineBudget{least_memory_ram, 64 * kGiB});
  chosen = cheapest_fitting(c);
  ASSERT_NE(chosen, nullptr);
  EXPECT_TRUE(chosen->spec.optimizer_on_disk) << chosen->name;
  // Below every candidate: nothing, and the table says so.
  c = plan_candidates(base_config(1), 1, "/var/tmp/x", model, MachineBudget{least_ram, 64 * kGiB});
  EXPECT_EQ(cheapest_fitting(c), nullptr);
  EXPECT_NE(candidates_table(c, MachineBudget{least_ram, 64 * kGiB}).find("nothing fits"),
            std::string::npos);
}

// What a base config cannot run is left out: compressed states with SGD; the disk and stage
// 3 with a delayed parameter update.
TEST(PlanChoice, LeavesOutWhatTheBaseCannotRun) {
  const MachineBudget budget{64 * kGiB, 64 * kGiB};
  auto sgd = base_config(2);
  sgd.optimizer.type = "sgd";
  for (const auto& c : plan_candidates(sgd, 2, "/var/tmp/x", model, budget)) {
    EXPECT_EQ(c.spec.states, optim::StateDtype::kFp32) << c.name;
  }
  auto dpu = base_config(2);
  dpu.zero.stage = 2;
  dpu.zero.offload_optimizer.device = "cpu";
  dpu.zero.offload_optimizer.delayed_param_update = true;
  const auto c = plan_candidates(dpu, 2, "/var/tmp/x", model, budget);
  ASSERT_EQ(c.size(), 3u * 2u);  // stage 2 in memory only
  for (const auto& cand : c) {
    EXPECT_EQ(cand.spec.stage, 2) << cand.name;
    EXPECT_FALSE(cand.spec.optimizer_on_disk) << cand.name;
    EXPECT_TRUE(cand.config.zero.offload_optimizer.delayed_param_update) << cand.name;
  }
}

TEST(PlanChoice, BadBudgetIsAUsageErrorNamingIt) {
  EXPECT_THROW(plan_candidates(base_config(1), 1, "/var/tmp/x", model, MachineBudget{0, 0}),
               UsageError);
  EXPECT_THROW(plan_candidates(base_config(1), 1, "", model, MachineBudget{kGiB, kGiB}),
               UsageError);
}

TEST(PlanChoice, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("--ram", "24GiB"), 24 * kGiB);
  EXPECT_EQ(parse_byte_size("--ram", "70GB"), int64_t{70000000000});
  EXPECT_EQ(parse_byte_size("--ram", "1.5TiB"), 1536 * kGiB);
  EXPECT_EQ(parse_byte_size("--disk", "0"), 0);
  EXPECT_EQ(parse_byte_size("--disk", "512MiB"), int64_t{512} << 20);
  for (const std::string bad : {"", "lots", "24 GiB", "-1GB", "GiB", "1e30TB", "3XB"}) {
    try {
      parse_byte_size("--ram", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--ram = '" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zoff::estimate
