// The engine, the planner and the estimator count every model state from the same Placement:
// for every placement a config can express, the engine's allocations equal both predictions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine_test_support.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/estimate/memory_estimate.h"
#include "zoff/estimate/run_plan.h"
#include "zoff/placement/state_bytes.h"

namespace zoff::estimate {
namespace {

namespace fs = std::filesystem;
using engine::testing::base_config;
using engine::testing::make_model;
using engine::testing::run_ranks;

// Wide enough that a shard spans several int8 blocks (2,048 elements) and units pad unevenly
// over 3 ranks: fc1 8 x 301 + 301, fc2 301 x 7 + 7, fc3 7 x 4 + 4.
constexpr int64_t kHidden = 301;
constexpr int64_t kGlobalBatch = 6;

struct Variant {
  int stage = 0;
  std::string precision;  // fp32 | bf16 | fp16
  std::string device;     // none | cpu | nvme
  std::string gradients;  // cpu | nvme | stream
  std::string states;     // fp32 | bf16 | int8
  bool params_on_disk = false;
  int stripes = 1;  // nvme directories
  std::string name() const {
    return "stage " + std::to_string(stage) + " " + precision + " " + device + " grads " +
           gradients + " states " + states + (params_on_disk ? " params nvme" : "") +
           (stripes > 1 ? " striped" : "");
  }
};

class TempDirs {
 public:
  explicit TempDirs(int n) {
    for (int i = 0; i < n; ++i) {
      dirs_.push_back((fs::temp_directory_path() /
                       ("zoff_agree_" + std::to_string(::getpid()) + "_" + std::to_string(i)))
                          .string());
      fs::create_directories(dirs_.back());
    }
  }
  ~TempDirs() {
    for (const auto& d : dirs_) fs::remove_all(d);
  }
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  std::vector<std::string> dirs_;
};

config::Config config_of(const Variant& v, int world, const std::vector<std::string>& dirs) {
  auto c = base_config(v.stage, world, kGlobalBatch, 1);
  c.bf16 = v.precision == "bf16";
  c.fp16.enabled = v.precision == "fp16";
  c.optimizer.state_dtype = v.states;
  c.zero.offload_optimizer.device = v.device;
  c.zero.offload_optimizer.gradients = v.gradients;
  c.zero.sub_group_size = 4096;
  const std::vector<std::string> paths(dirs.begin(), dirs.begin() + v.stripes);
  if (v.device == "nvme") c.zero.offload_optimizer.nvme_paths = paths;
  if (v.params_on_disk) {
    c.zero.offload_param.device = "nvme";
    c.zero.offload_param.nvme_paths = paths;
  }
  return c;
}

std::vector<Variant> every_variant() {
  std::vector<Variant> out;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const char* precision : {"fp32", "bf16", "fp16"}) {
      for (const char* states : {"fp32", "bf16", "int8"}) {
        for (const char* device : {"none", "cpu", "nvme"}) {
          for (const char* grads : {"cpu", "nvme", "stream"}) {
            for (bool params : {false, true}) {
              Variant v{stage, precision, device, grads, states, params, 1};
              out.push_back(v);
              if (std::string(device) == "nvme" && std::string(grads) == "cpu") {
                v.stripes = 2;
                out.push_back(v);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

int64_t item(const std::vector<PlanItem>& items, const std::vector<std::string>& names) {
  int64_t bytes = 0;
  for (const auto& i : items) {
    for (const auto& n : names) bytes += i.name == n ? i.bytes : 0;
  }
  return bytes;
}

// The engine's model-state bytes (after one step, so that everything is allocated) against
// state_bytes of its own placement and against the plan of the same config.
void check_agreement(const engine::ZeroEngine& e, const config::Config& c, int world,
                     const std::string& what) {
  const engine::MemoryStats m = e.memory();
  const auto& layout = e.layout();
  std::vector<int64_t> units;
  for (const auto& u : layout.units()) units.push_back(u.numel);
  const auto shape = placement::state_shape(units, world, c.zero.stage, 2);
  // The optimizer's elements: the whole buffer at stage 0 (every rank updates all of it).
  ASSERT_EQ(shape.shard, c.zero.stage == 0 ? layout.padded_numel() : layout.shard_size()) << what;
  const placement::StateBytes b = placement::state_bytes(e.placement(), shape);
  const int64_t params = static_cast<int64_t>(
      m.host_shared_params > 0 ? m.host_shared_params : m.compute.params - m.live_unit_bytes);
  if (!e.placement().params_on_disk()) {
    EXPECT_EQ(params, b.memory_params) << what;
  }
  EXPECT_EQ(static_cast<int64_t>(m.compute.grads + m.offload.grads), b.memory_grads) << what;
  EXPECT_EQ(static_cast<int64_t>(m.compute.master + m.offload.master), b.memory_master) << what;
  EXPECT_EQ(static_cast<int64_t>(m.compute.optim + m.offload.optim), b.memory_states) << what;
  EXPECT_EQ(static_cast<int64_t>(m.nvme.params), b.disk_params) << what;
  EXPECT_EQ(static_cast<int64_t>(m.nvme.grads), b.disk_grads) << what;
  EXPECT_EQ(static_cast<int64_t>(m.nvme.master), b.disk_master) << what;
  EXPECT_EQ(static_cast<int64_t>(m.nvme.optim), b.disk_states) << what;

  PlanModel model;
  model.unit_elems = units;
  const RunPlan plan = plan_run(c, world, model);
  EXPECT_EQ(item(plan.host, {"parameters", "parameter pieces"}), b.memory_params) << what;
  EXPECT_EQ(item(plan.host, {"gradients", "gradient shard"}), b.memory_grads) << what;
  EXPECT_EQ(item(plan.host, {"fp32 master"}), b.memory_master) << what;
  EXPECT_EQ(item(plan.host, {"optimizer states", "int8 scales"}), b.memory_states) << what;
  EXPECT_EQ(plan.disk_bytes, b.disk()) << what;
}

// One engine per variant on `world` ranks: a variant the placement refuses is refused by the
// engine too (the same rule, once); the others agree with the plan.
int check_variants(int world, const std::vector<Variant>& variants) {
  TempDirs tmp(2);
  int built = 0;
  for (const auto& v : variants) {
    const auto c = config_of(v, world, tmp.dirs());
    bool valid = true;
    try {
      placement::PlacementContext ctx;
      ctx.world = world;
      placement::resolve(c, ctx);
    } catch (const UsageError&) {
      valid = false;
    }
    if (!valid && world > 1) continue;  // refusals are checked on one rank
    run_ranks(world, [&](dist::CommPtr comm, int rank) {
      auto model = make_model(3, /*plain=*/false, kHidden);
      if (!valid) {
        EXPECT_THROW(engine::ZeroEngine(model.ptr(), c, comm), UsageError) << v.name();
        return;
      }
      engine::ZeroEngine e(model.ptr(), c, comm);
      const auto dtype = e.compute_dtype();
      const int64_t local = kGlobalBatch / world;
      auto [x, y] = engine::testing::global_batch(0, kGlobalBatch);
      auto xs = x.narrow(0, rank * local, local).to(dtype);
      auto loss =
          torch::mse_loss(model->forward(xs).to(torch::kFloat32), y.narrow(0, rank * local, local));
      e.backward(loss);
      e.step();
      check_agreement(e, c, world, v.name() + " on " + std::to_string(world) + " ranks");
    });
    built += valid ? 1 : 0;
  }
  return built;
}

TEST(PlacementAgreement, EngineAndPlanCountEveryExpressiblePlacementAlikeOnOneRank) {
  const int built = check_variants(1, every_variant());
  EXPECT_GT(built, 60);  // the valid ones among them were all built and compared
}

TEST(PlacementAgreement, EngineAndPlanAgreeOnThreeRanksWithUnevenUnits) {
  std::vector<Variant> bf16;
  for (const auto& v : every_variant()) {
    if (v.precision == "bf16" && v.states == "int8") bf16.push_back(v);
  }
  EXPECT_GT(check_variants(3, bf16), 10);
}

// The estimator's master and states for a stage and offload tier are state_bytes' for the
// placement that config resolves to (one rank, one unit, no padding).
TEST(PlacementAgreement, EstimatorCountsTheMasterAndStatesOfTheResolvedPlacement) {
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* device : {"none", "cpu", "nvme"}) {
      for (int stage = 1; stage <= 3; ++stage) {
        EstimateOptions o;
        o.params = 10000;
        o.precision = parse_precision(precision);
        o.offload = parse_offload(device);
        const auto est = estimate_memory(o).stages[static_cast<size_t>(stage)];
        Variant v{stage, precision, device, "cpu", "fp32", false, 1};
        const auto c = config_of(v, 1, {"/var/tmp", "/tmp"});
        const auto pl = placement::resolve(c, placement::PlacementContext{});
        placement::StateShape shape;
        shape.params = shape.shard = o.params;
        const auto b = placement::state_bytes(pl, shape);
        EXPECT_EQ(est.compute_optim_bytes + est.offload_optim_bytes,
                  b.memory_master + b.memory_states + b.disk_master + b.disk_states)
            << v.name();
      }
    }
  }
}

}  // namespace
}  // namespace zoff::estimate
