// Tests the planner's arithmetic: the engine's rules for shards, sub-groups and tier files.
#include "zoff/estimate/run_plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "zoff/core/error.h"
#include "zoff/optim/state_dtype.h"
#include "zoff/placement/stream_window.h"

namespace zoff::estimate::run_plan_test {
namespace {

int64_t item(const std::vector<PlanItem>& items, const std::string& name) {
  for (const auto& i : items) {
    if (i.name == name) return i.bytes;
  }
  return 0;
}

config::Config on_disk(const std::string& gradients, const std::string& state_dtype) {
  config::Config c;
  c.gradient_accumulation_steps = 1;  // as parse_config fills it in
  c.bf16 = true;
  c.optimizer.type = "adamw";
  c.optimizer.state_dtype = state_dtype;
  c.zero.stage = 3;
  c.zero.sub_group_size = 1000000;
  c.zero.offload_optimizer.device = "nvme";
  c.zero.offload_optimizer.nvme_paths = {"/var/tmp"};
  c.zero.offload_optimizer.gradients = gradients;
  c.zero.offload_param.device = "nvme";
  c.zero.offload_param.nvme_paths = {"/var/tmp"};
  return c;
}

// Three units of 10, 1001 and 5000 elements at world 3: each padded to a multiple of 3
// (12, 1002, 5001), a shard of 4 + 334 + 1667 = 2005 elements per rank.
TEST(RunPlan, DiskIsTheShardTimesEachFilesBytesPerElement) {
  PlanModel m;
  m.unit_elems = {10, 1001, 5000};
  const auto p = plan_run(on_disk("nvme", "int8"), 3, m);
  EXPECT_EQ(p.params, 6011);
  EXPECT_EQ(p.shard_elems, 2005);
  // The split master (the default with bf16 on disk): 16-bit extensions beside the bf16
  // parameters, 6 bytes per element with int8 states.
  EXPECT_EQ(item(p.disk, "fp32 master"), 2005 * 2);
  EXPECT_EQ(item(p.disk, "optimizer states"), 2 * 2005);  // m and v, one byte each
  EXPECT_EQ(item(p.disk, "gradient shard"), 2005 * 4);
  EXPECT_EQ(item(p.disk, "parameters"), 2005 * 2);  // bf16
  EXPECT_EQ(p.disk_bytes, 2005 * (2 + 2 + 4 + 2));
  // Streamed gradients: no gradient file, a window of sub-groups in memory instead.
  const auto s = plan_run(on_disk("stream", "int8"), 3, m);
  EXPECT_EQ(item(s.disk, "gradient shard"), 0);
  EXPECT_EQ(s.disk_bytes, 2005 * (2 + 2 + 2));
  EXPECT_GT(item(s.host, "gradient window"), 0);
  EXPECT_EQ(item(s.host, "gradient buffers"), 0);
  // split_master false: the 4-byte master.
  auto full = on_disk("stream", "int8");
  full.zero.offload_optimizer.split_master = false;
  EXPECT_EQ(plan_run(full, 3, m).disk_bytes, 2005 * (4 + 2 + 2));
}

// split_master true where it cannot apply is refused, naming the key.
TEST(RunPlan, SplitMasterWhereItCannotApplyIsRefused) {
  PlanModel m;
  m.unit_elems = {10, 1001, 5000};
  auto c = on_disk("stream", "int8");
  c.bf16 = false;
  c.zero.offload_optimizer.split_master = true;
  try {
    plan_run(c, 3, m);
    FAIL() << "split_master true with fp32 compute was taken";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("split_master = true needs bf16"), std::string::npos)
        << e.what();
  }
}

// The sub-group is rounded as the engine rounds it: int8 states need whole 2048-element
// blocks and 4 KiB-aligned codes (4096 elements), and no more than the shard rounded up.
TEST(RunPlan, StepBuffersUseTheEnginesSubGroupRounding) {
  PlanModel m;
  m.unit_elems = {100000000};
  auto c = on_disk("stream", "int8");
  c.zero.sub_group_size = 1000001;
  const auto p = plan_run(c, 1, m);
  const int64_t group = (1000001 + 4095) / 4096 * 4096;
  // 3 sets of: the split master's 2-byte extensions, two 1-byte states, the bf16 copy for
  // the parameter file; and one sub-group of fp32 the range copies go through.
  EXPECT_EQ(item(p.host, "step buffers"), 3 * group * (2 + 2 + 2));
  EXPECT_EQ(item(p.host, "range-copy buffer"), group * 4);
  // One unit of 98 sub-groups comes at once: the window takes all of them.
  EXPECT_EQ(item(p.host, "gradient window"), 100000000 * 4);
  // The zero sub-group is read, never written: the kernel's zero page, not resident.
  EXPECT_EQ(item(p.host, "zero gradients"), 0);
  EXPECT_EQ(item(p.host, "int8 scales"), 2 * ((100000000 + 2047) / 2048) * 4);
  c.zero.offload_optimizer.stream_buffers = 5;
  EXPECT_EQ(item(plan_run(c, 1, m).host, "gradient window"), 5 * group * 4);
  // A shard of 3 sub-groups never holds more than 3, the last one 5 elements short.
  m.unit_elems = {3 * group - 5};
  c.zero.offload_optimizer.stream_buffers = 0;
  EXPECT_EQ(item(plan_run(c, 1, m).host, "gradient window"), (3 * group - 5) * 4);
}

// The window's automatic size: a unit's sub-groups (one more: a unit may start inside one)
// beside the step's 3 sets, at least 4 x 3 and 8 (placement::auto_stream_buffers).
TEST(RunPlan, StreamWindowTakesTheLargestUnitAtOnce) {
  auto c = on_disk("stream", "int8");
  c.zero.sub_group_size = 1000001;
  const int64_t group = (1000001 + 4095) / 4096 * 4096;  // 1003520
  PlanModel m;
  m.unit_elems = std::vector<int64_t>(5, 20000000);  // 20M: 20 sub-groups, spans 21
  EXPECT_EQ(item(plan_run(c, 1, m).host, "gradient window"), (21 + 3) * group * 4);
  m.unit_elems = std::vector<int64_t>(20, 2000000);  // 2M: spans 3; 4 x 3 is more
  EXPECT_EQ(item(plan_run(c, 1, m).host, "gradient window"), 12 * group * 4);
  // At world 2 a rank takes half of each unit: 10M spans 11.
  m.unit_elems = std::vector<int64_t>(5, 20000000);
  EXPECT_EQ(item(plan_run(c, 2, m).host, "gradient window"), (11 + 3) * group * 4);
  EXPECT_EQ(placement::auto_stream_buffers(3, group, 0), 12);
  EXPECT_EQ(placement::auto_stream_buffers(1, group, 1), 8);
  EXPECT_THROW(placement::auto_stream_buffers(0, group, 1), UsageError);
  EXPECT_THROW(placement::auto_stream_buffers(3, 0, 1), UsageError);
}

// Without offload the states are in memory: the ZeRO model-state bytes of the stage.
TEST(RunPlan, InMemoryStatesFollowTheStage) {
  PlanModel m;
  m.unit_elems = {600, 600};
  config::Config c;
  c.gradient_accumulation_steps = 1;  // as parse_config fills it in
  c.bf16 = true;
  c.optimizer.type = "adamw";
  c.zero.stage = 2;
  const auto p = plan_run(c, 2, m);
  EXPECT_EQ(item(p.host, "parameters"), 1200 * 2);
  EXPECT_EQ(item(p.host, "gradient shard"), 600 * 4);
  EXPECT_EQ(item(p.host, "fp32 master"), 600 * 4);
  EXPECT_EQ(item(p.host, "optimizer states"), 600 * 8);
  EXPECT_EQ(p.disk_bytes, 0);
  const auto j = nlohmann::json::parse(to_json(p));
  EXPECT_EQ(j.at("host_bytes").get<int64_t>(), p.host_bytes);
  // The split master in memory, asked for: the 16-bit extensions only (the copy half is the
  // parameters); unset, the master in memory stays fp32.
  c.zero.offload_optimizer.split_master = true;
  const auto split = plan_run(c, 2, m);
  EXPECT_EQ(item(split.host, "fp32 master"), 600 * 2);
  EXPECT_EQ(split.host_bytes, p.host_bytes - 600 * 2);
  c.zero.offload_optimizer.device = "cpu";
  c.zero.offload_optimizer.split_master.reset();
  EXPECT_EQ(item(plan_run(c, 2, m).host, "fp32 master"), 600 * 4);
}

// Peak host memory: what is there all along plus both peaks of backward, which overlap.
TEST(RunPlan, HostIsAlwaysPlusBothPhases) {
  PlanModel m;
  m.unit_elems = {100000000};
  m.activation_bytes = 7000000000;
  m.late_activation_bytes = 1000;
  const auto p = plan_run(on_disk("stream", "int8"), 1, m);
  EXPECT_EQ(p.start_bytes, 7000000000);
  EXPECT_EQ(p.end_bytes, item(p.host, "gradient window") + 1000);
  EXPECT_EQ(p.host_bytes, p.always_bytes + 7000000000 + p.end_bytes);
}

// Buffers of a sub-group size the shard never fills are counted as far as its sub-groups
// fill them: a 2.5-group shard touches two whole buffer sets and half of a third, and no
// more window than its sub-groups.
TEST(RunPlan, BuffersCountOnlyWhatTheShardsSubGroupsFill) {
  PlanModel m;
  m.unit_elems = {2500000};
  auto c = on_disk("stream", "fp32");
  const auto p = plan_run(c, 1, m);
  const int64_t per_element = 2 + 2 * 4 + 2;  // split master's extensions, two fp32 states, copy
  EXPECT_EQ(item(p.host, "step buffers"), 2500000 * per_element);
  // One sub-group of fp32, rounded as the engine rounds it (to whole 4 KiB blocks).
  const int64_t group = optim::round_sub_group(c.zero.sub_group_size, 4096, 2500000, 4);
  EXPECT_EQ(item(p.host, "range-copy buffer"), group * 4);
  EXPECT_EQ(item(p.host, "gradient window"), 2500000 * 4);
  m.unit_elems = {1500000};
  EXPECT_EQ(item(plan_run(c, 1, m).host, "step buffers"), 1500000 * per_element);
}

// The pieces' read buffers stay within offload_param.max_in_cpu elements, or the two largest
// pieces when that is more (the piece in use and the next must fit: tier_unit_pieces.cpp),
// and never past the shard. Units of 10, 1001 and 5000 at world 3: pieces of 4, 334 and
// 1667 elements (units padded to 12, 1002, 5001), a shard of 2005.
TEST(RunPlan, ReadAheadHoldsAtLeastTheTwoLargestPieces) {
  PlanModel m;
  m.unit_elems = {10, 1001, 5000};
  auto c = on_disk("stream", "int8");
  c.zero.offload_param.max_in_cpu = 100;
  EXPECT_EQ(item(plan_run(c, 3, m).host, "read-ahead pieces"), (1667 + 334) * 2);  // bf16
  c.zero.offload_param.max_in_cpu = 2003;
  EXPECT_EQ(item(plan_run(c, 3, m).host, "read-ahead pieces"), 2003 * 2);
  c.zero.offload_param.max_in_cpu = 1000000000;
  EXPECT_EQ(item(plan_run(c, 3, m).host, "read-ahead pieces"), 2005 * 2);
  // At world 1 the pieces are the units: 5000 + 1001.
  c.zero.offload_param.max_in_cpu = 1;
  EXPECT_EQ(item(plan_run(c, 1, m).host, "read-ahead pieces"), (5000 + 1001) * 2);
}

TEST(RunPlan, AnEmptyModelOrNoRanksIsAUsageError) {
  PlanModel m;
  EXPECT_THROW(plan_run(config::Config{}, 1, m), UsageError);
  m.unit_elems = {5};
  EXPECT_THROW(plan_run(config::Config{}, 0, m), UsageError);
}

}  // namespace
}  // namespace zoff::estimate::run_plan_test
