// gpt tiny still converges with the delayed parameter update (bf16, ZeRO-2, cpu offload).
#include <gtest/gtest.h>

#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::train_delayed_update_test {
namespace {

constexpr int64_t kSteps = 120;
constexpr int64_t kDpuWarmup = 40;  // as in the ZeRO-Offload paper
// The delayed run uses parameters one step stale: its loss may trail the plain run's a
// little, not more than this (mean of the last 10 steps, relative).
constexpr double kDpuLossSlack = 0.10;
// Both runs must have learned: last-10 mean below this fraction of the first step's loss.
constexpr double kLearnedFraction = 0.7;

TEST(DelayedParamUpdate, GptTinyStillConverges) {
  TempDir dir;
  std::vector<double> final_loss;
  for (bool dpu : {false, true}) {
    nlohmann::json config = example_config("test_gpt_exact.json");
    config["optimizer"]["params"]["lr"] = 3e-3;
    config["scheduler"]["params"]["total_num_steps"] = kSteps;
    config["bf16"] = {{"enabled", true}};
    config["zero_optimization"]["stage"] = 2;
    config["zero_optimization"]["offload_optimizer"] = {
        {"device", "cpu"},
        {"delayed_param_update", {{"enabled", dpu}, {"warmup_steps", kDpuWarmup}}}};
    TrainJob job;
    job.model = "gpt";
    job.preset = "tiny";
    job.config_path = dir.file(dpu ? "dpu.json" : "plain.json");
    write_text(job.config_path, config.dump(2));
    job.steps = kSteps;
    job.seed = 2;
    job.world = 2;
    job.log_path = dir.file(dpu ? "dpu.jsonl" : "plain.jsonl");
    auto r = run_train(job);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const auto rows = read_step_log(job.log_path);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps));
    const double first = rows.front()["loss"].get<double>();
    final_loss.push_back(mean_last_loss(rows, 10));
    EXPECT_LT(final_loss.back(), kLearnedFraction * first) << (dpu ? "dpu" : "plain");
  }
  std::printf("gpt tiny, %lld steps: last-10 mean loss plain %.4f, delayed update %.4f\n",
              static_cast<long long>(kSteps), final_loss[0], final_loss[1]);
  EXPECT_LT(final_loss[1], (1.0 + kDpuLossSlack) * final_loss[0]);
}

}  // namespace
}  // namespace zoff::cli_test::train_delayed_update_test
