// The `mem` bytes `zoff train` logs per step, against the fp32 ZeRO table (params, grads, optim),
// stages 0-3.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cli_test_support.h"
#include "zoff/train/task.h"

namespace zoff::cli_test::train_memory_test {
namespace {

// Shards are padded to a multiple of the world size and buckets round up: a few elements
// of the ~6.8k of the mlp, well inside this.
constexpr double kMemRelTol = 0.05;
constexpr int64_t kSteps = 2;
constexpr uint64_t kSeed = 1;
// fp32 training: 4-byte params and grads, AdamW keeps m and v (K = 8 bytes per parameter).
constexpr double kParamBytes = 4;
constexpr double kGradBytes = 4;
constexpr double kOptimBytes = 8;
// Stages 1 and 2 in fp32 also keep an fp32 master shard: the optimizer updates one
// contiguous shard space, and the whole parameters' pieces of it are not contiguous.
// (Stage 0's master is the parameters themselves, stage 3's is its parameter shard.)
constexpr double kMasterBytes = 4;

struct MemCase {
  int stage;
  int world;
};

std::string case_name(const testing::TestParamInfo<MemCase>& info) {
  return "Stage" + std::to_string(info.param.stage) + "_World" + std::to_string(info.param.world);
}

// Writes the mlp test config with `stage` and runs `job` with it; returns the step lines.
std::vector<nlohmann::json> run_logged(const TempDir& dir, const std::string& tag, int stage,
                                       int world, bool reference, ProcessResult* process) {
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = stage;
  // Stage 3: every unit released after use, so the logged parameters are the shards.
  config["zero_optimization"]["stage3_param_persistence_threshold"] = 0;
  TrainJob job;
  job.config_path = dir.file(tag + ".json");
  job.log_path = dir.file(tag + ".jsonl");
  job.steps = kSteps;
  job.seed = kSeed;
  job.world = world;
  job.reference = reference;
  write_text(job.config_path, config.dump(2));
  *process = run_train(job);
  if (process->exit_code != 0) return {};
  return read_step_log(job.log_path);
}

void PrintTo(const MemCase& c, std::ostream* os) {
  *os << "stage " << c.stage << " world " << c.world;
}

class TrainMemory : public testing::TestWithParam<MemCase> {};

TEST_P(TrainMemory, LoggedBytesFollowTheZeroTable) {
  const auto [stage, world] = GetParam();
  TempDir dir;
  ProcessResult ref_run, run;
  const auto ref_steps = run_logged(dir, "reference", stage, 1, true, &ref_run);
  ASSERT_EQ(ref_run.exit_code, 0) << describe(ref_run);
  ASSERT_EQ(ref_steps.size(), static_cast<size_t>(kSteps));
  // psi from the plain-LibTorch run (fp32 params), checked against the model itself.
  const double psi = ref_steps.back().at("mem").at("params").get<double>() / kParamBytes;
  int64_t numel = 0;
  for (const auto& p : train::make_task({"mlp", "", kSeed})->module()->parameters()) {
    numel += p.numel();
  }
  ASSERT_EQ(psi, static_cast<double>(numel));

  const auto steps = run_logged(dir, "zoff", stage, world, false, &run);
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  const double n = world;
  // Stages 1-2 on one host keep one parameter copy the ranks share (host_shared_params):
  // each rank logs its share, and the whole copy beside it.
  const bool one_copy = world > 1 && (stage == 1 || stage == 2);
  const double want_params = stage == 3 || one_copy ? kParamBytes * psi / n : kParamBytes * psi;
  const double want_grads = stage >= 2 ? kGradBytes * psi / n : kGradBytes * psi;
  const double want_optim = stage == 0   ? kOptimBytes * psi
                            : stage == 3 ? kOptimBytes * psi / n
                                         : (kOptimBytes + kMasterBytes) * psi / n;
  for (const auto& s : steps) {
    const auto& mem = s.at("mem");
    const double params = mem.at("params").get<double>();
    const double grads = mem.at("grads").get<double>();
    const double optim = mem.at("optim").get<double>();
    EXPECT_NEAR(params, want_params, kMemRelTol * want_params) << "step " << s.at("step");
    EXPECT_NEAR(grads, want_grads, kMemRelTol * want_grads) << "step " << s.at("step");
    EXPECT_NEAR(optim, want_optim, kMemRelTol * want_optim) << "step " << s.at("step");
    const double shared = mem.value("host_shared_params", 0.0);
    EXPECT_NEAR(shared, one_copy ? kParamBytes * psi : 0.0, kMemRelTol * kParamBytes * psi)
        << "step " << s.at("step");
  }
  const auto& mem = steps.back().at("mem");
  std::printf(
      "[mem] stage %d N %d psi %.0f: params %.0f (want %.0f), grads %.0f (want %.0f), optim %.0f "
      "(want %.0f), buffers %.0f bytes\n",
      stage, world, psi, mem.at("params").get<double>(), want_params, mem.at("grads").get<double>(),
      want_grads, mem.at("optim").get<double>(), want_optim, mem.at("buffers").get<double>());
  std::fflush(stdout);
}

INSTANTIATE_TEST_SUITE_P(Mlp, TrainMemory,
                         testing::Values(MemCase{0, 1}, MemCase{0, 2}, MemCase{0, 3}, MemCase{1, 1},
                                         MemCase{1, 2}, MemCase{1, 3}, MemCase{2, 1}, MemCase{2, 2},
                                         MemCase{2, 3}, MemCase{3, 1}, MemCase{3, 2},
                                         MemCase{3, 3}),
                         case_name);

}  // namespace
}  // namespace zoff::cli_test::train_memory_test
