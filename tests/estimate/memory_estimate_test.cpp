// Tests the ZeRO memory model against the ZeRO paper's Table 1 and its offload/fp32 variants.
#include "zoff/estimate/memory_estimate.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "zoff/core/error.h"

namespace zoff::estimate::memory_estimate_test {
namespace {

// ZeRO paper (Rajbhandari et al. 2020), Table 1: per-device model-state memory for
// psi = 7.5B, N = 64, mixed precision Adam (K = 12), printed to 3 significant digits.
constexpr int64_t kTable1Params = 7'500'000'000;
constexpr double kTable1Gb[4] = {120.0, 31.4, 16.6, 1.9};
constexpr double kTable1RoundingGb = 0.05;  // the paper prints one decimal

TEST(MemoryEstimate, ReproducesZeroPaperTable1) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = kTable1Params;
  o.ranks = 64;
  o.precision = Precision::kFp16;
  const MemoryEstimate m = estimate_memory(o);
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(static_cast<double>(m.stages[s].per_rank_bytes) / 1e9, kTable1Gb[s],
                kTable1RoundingGb)
        << "stage " << s;
    EXPECT_EQ(m.stages[s].offload_bytes, 0);
  }
  // Exact bytes from the paper's formulas (7.5e9 / 64 = 117,187,500 elements per shard).
  EXPECT_EQ(m.stages[0].per_rank_bytes, 120'000'000'000);
  EXPECT_EQ(m.stages[1].per_rank_bytes, 31'406'250'000);
  EXPECT_EQ(m.stages[2].per_rank_bytes, 16'640'625'000);
  EXPECT_EQ(m.stages[3].per_rank_bytes, 1'875'000'000);
}

TEST(MemoryEstimate, ZoffEngineKeepsFp32GradientsAndLiveUnitsAtStage3) {
  EstimateOptions o;
  o.params = 1'200'000;
  o.ranks = 3;
  o.live_params = 50'000;
  const auto m = estimate_memory(o);
  const int64_t s = o.params / 3;
  EXPECT_EQ(m.stages[3].compute_bytes, (2 + 4 + 12) * s + 2 * 50'000);
  EXPECT_EQ(m.stages[3].compute_live_bytes, 2 * 50'000);
  EXPECT_EQ(m.stages[2].compute_bytes, 2 * o.params + (4 + 12) * s);
  EXPECT_EQ(m.stages[0].compute_bytes, (2 + 4 + 12) * o.params);
}

TEST(MemoryEstimate, PerNodeIsPerRankTimesRanksPerNode) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = kTable1Params;
  o.ranks = 64;
  o.nodes = 8;
  o.offload = OffloadTier::kCpu;
  const MemoryEstimate m = estimate_memory(o);
  EXPECT_EQ(m.ranks_per_node, 8);
  for (const StageEstimate& e : m.stages) {
    EXPECT_EQ(e.per_node_compute_bytes, 8 * e.compute_bytes);
    EXPECT_EQ(e.per_node_offload_bytes, 8 * e.offload_bytes);
    EXPECT_EQ(e.per_node_bytes, e.per_node_compute_bytes + e.per_node_offload_bytes);
  }
}

TEST(MemoryEstimate, OffloadMovesOptimizerAndGradientShard) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = 1'000'000;
  o.ranks = 4;
  o.offload = OffloadTier::kCpu;
  o.precision = Precision::kBf16;
  const MemoryEstimate m = estimate_memory(o);
  const int64_t psi = o.params, shard = psi / 4;
  // Stage 2 + offload (ZeRO-Offload's setting): device keeps 2psi of bf16 params only.
  EXPECT_EQ(m.stages[2].compute_bytes, 2 * psi);
  EXPECT_EQ(m.stages[2].offload_grads_bytes, 4 * shard);
  EXPECT_EQ(m.stages[2].offload_optim_bytes, 12 * shard);
  // Stage 1: the full bf16 gradients stay on the device.
  EXPECT_EQ(m.stages[1].compute_bytes, 4 * psi);
  EXPECT_EQ(m.stages[1].offload_bytes, 16 * shard);
  // Stage 3: only the parameter shard stays.
  EXPECT_EQ(m.stages[3].compute_bytes, 2 * shard);
  // Stage 0: nothing is sharded, so all of the optimizer moves.
  EXPECT_EQ(m.stages[0].offload_bytes, 16 * psi);
}

TEST(MemoryEstimate, Fp32UsesFourByteStatesAndKEightWhereTheParamsAreTheMaster) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = 1'000'000;
  o.ranks = 4;
  o.precision = Precision::kFp32;
  const MemoryEstimate m = estimate_memory(o);
  const int64_t psi = o.params, shard = psi / 4;
  EXPECT_EQ(m.stages[0].per_rank_bytes, (4 + 4 + 8) * psi);
  // Stages 1-2 keep the whole fp32 parameters apart from this rank's fp32 master shard
  // (4 bytes more per shard element than the paper's K = 8: what zoff's engine allocates,
  // checked against it in placement_agreement_test.cpp).
  EXPECT_EQ(m.stages[1].per_rank_bytes, 8 * psi + 12 * shard);
  EXPECT_EQ(m.stages[2].per_rank_bytes, 4 * psi + 16 * shard);
  EXPECT_EQ(m.stages[3].per_rank_bytes, 16 * shard);
}

TEST(MemoryEstimate, UnevenShardsArePadded) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = 10;
  o.ranks = 3;  // shards of ceil(10 / 3) = 4 elements
  const MemoryEstimate m = estimate_memory(o);
  EXPECT_EQ(m.stages[3].per_rank_bytes, 16 * 4);
}

TEST(MemoryEstimate, HostSharedParamsCountEachRanksShareAtStagesOneAndTwo) {
  EstimateOptions o;
  o.params = 10;
  o.ranks = 3;  // shards of 4 elements; the shared copy is 12 padded elements
  const MemoryEstimate own = estimate_memory(o);
  o.host_shared_params = true;
  const MemoryEstimate shared = estimate_memory(o);
  for (int s : {0, 3}) {
    EXPECT_EQ(shared.stages[s].compute_params_bytes, own.stages[s].compute_params_bytes) << s;
  }
  for (int s : {1, 2}) {
    EXPECT_EQ(own.stages[s].compute_params_bytes, 2 * 10) << s;
    EXPECT_EQ(shared.stages[s].compute_params_bytes, 2 * 4) << s;
    EXPECT_EQ(shared.stages[s].per_node_compute_bytes - own.stages[s].per_node_compute_bytes,
              3 * (2 * 4 - 2 * 10))
        << s;
  }
  o.ranks = 4;
  o.nodes = 2;
  try {
    estimate_memory(o);
    ADD_FAILURE() << "host_shared_params over 2 nodes was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("host_shared_params with nodes = 2"), std::string::npos)
        << e.what();
  }
}

TEST(MemoryEstimate, JsonHasEveryStage) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = 350'000'000;
  o.ranks = 2;
  o.offload = OffloadTier::kNvme;
  const auto j = nlohmann::json::parse(to_json(estimate_memory(o)));
  EXPECT_EQ(j["params"], 350'000'000);
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["nodes"], 1);
  EXPECT_EQ(j["precision"], "bf16");
  EXPECT_EQ(j["offload"], "nvme");
  for (const char* s : {"0", "1", "2", "3"}) {
    const auto& st = j["stages"][s];
    for (const char* key : {"per_rank_bytes", "per_node_bytes", "compute_bytes", "offload_bytes"}) {
      ASSERT_TRUE(st.contains(key)) << s << " " << key;
      EXPECT_GT(st[key].get<int64_t>(), 0) << s << " " << key;
    }
  }
}

TEST(MemoryEstimate, TableNamesStagesAndUnits) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = kTable1Params;
  o.ranks = 64;
  const std::string t = to_table(estimate_memory(o));
  EXPECT_NE(t.find("120.00 GB"), std::string::npos) << t;
  EXPECT_NE(t.find("31.41 GB"), std::string::npos) << t;
  EXPECT_NE(t.find("GiB"), std::string::npos) << t;
  EXPECT_NE(t.find("3 (+ parameters)"), std::string::npos) << t;
}

TEST(MemoryEstimate, BadInputIsUsageError) {
  EstimateOptions o;
  o.fp32_gradients = false;  // the paper's accounting
  o.params = 100;
  o.ranks = 6;
  o.nodes = 4;  // 6 ranks do not split over 4 nodes
  EXPECT_THROW(estimate_memory(o), UsageError);
  o.nodes = 1;
  o.params = 0;
  EXPECT_THROW(estimate_memory(o), UsageError);
  o.params = 100;
  o.ranks = 0;
  EXPECT_THROW(estimate_memory(o), UsageError);
  EXPECT_THROW(parse_precision("fp8"), UsageError);
  EXPECT_THROW(parse_offload("gpu"), UsageError);
  EXPECT_EQ(parse_offload("nvme"), OffloadTier::kNvme);
  EXPECT_EQ(parse_precision("fp32"), Precision::kFp32);
}

}  // namespace
}  // namespace zoff::estimate::memory_estimate_test

namespace zoff::estimate::memory_estimate_test {
namespace {

// optimizer.state_dtype: m + v take 8, 4 or 2 (1 + 4 / 2048) bytes per element; the fp32
// master (mixed precision or offload) stays 4.
TEST(MemoryEstimateStateDtype, OptimizerBytesFollowTheStoredStates) {
  EXPECT_EQ(adam_state_bytes(StateDtype::kFp32, 4096), 8 * 4096);
  EXPECT_EQ(adam_state_bytes(StateDtype::kBf16, 4096), 4 * 4096);
  EXPECT_EQ(adam_state_bytes(StateDtype::kInt8, 4096), 2 * (4096 + 4 * 2));
  EXPECT_EQ(adam_state_bytes(StateDtype::kInt8, 4097), 2 * (4097 + 4 * 3));  // a partial block
  EstimateOptions o;
  o.params = 1000000;
  o.ranks = 4;
  o.offload = OffloadTier::kCpu;
  for (StateDtype d : {StateDtype::kFp32, StateDtype::kBf16, StateDtype::kInt8}) {
    o.state_dtype = d;
    const auto m = estimate_memory(o);
    const int64_t shard = 250000;
    EXPECT_EQ(m.stages[2].offload_optim_bytes, 4 * shard + adam_state_bytes(d, shard));
    o.offload = OffloadTier::kNone;
    EXPECT_EQ(estimate_memory(o).stages[1].compute_optim_bytes,
              4 * shard + adam_state_bytes(d, shard));  // bf16 mixed: master + states
    o.offload = OffloadTier::kCpu;
    const double per_param =
        static_cast<double>(adam_state_bytes(d, shard)) / static_cast<double>(shard);
    EXPECT_LE(per_param, d == StateDtype::kFp32 ? 8.0 : d == StateDtype::kBf16 ? 4.0 : 2.01);
    EXPECT_NE(to_json(m).find("\"state_dtype\": \"" + optim::state_dtype_name(d) + "\""),
              std::string::npos);
  }
}

}  // namespace
}  // namespace zoff::estimate::memory_estimate_test
