// fp16 training on the CPU (`zoff train`): DeepSpeed's fp16 configs run unchanged, the loss
// scale is dynamic (overflow skips the step and lowers the scale), and fp16 learns as bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::train_fp16_test {
namespace {

constexpr int64_t kSteps = 60;
// fp16 and bf16 runs of the same job: the last-10 mean losses apart by at most this
// (relative). fp16 carries 3 more mantissa bits; both keep fp32 masters. The fp16 run starts
// at a loss scale of 2^10, where gpt tiny's gradients do not overflow: with DeepSpeed's 2^16
// its first steps are skipped (measured at 80 steps: 3.2617 against bf16's 3.1313, 4.2%).
constexpr double kFp16VsBf16LossRelTol = 0.03;
constexpr int kInitialScalePower = 10;
// The runs must have learned: last-10 mean below this fraction of the first step's loss.
constexpr double kLearnedFraction = 0.8;

std::vector<nlohmann::json> train_gpt_tiny(const TempDir& dir, const std::string& tag,
                                           const nlohmann::json& config, int64_t steps) {
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file(tag + ".json");
  write_text(job.config_path, config.dump(2));
  job.steps = steps;
  job.seed = 3;
  job.world = 2;
  job.log_path = dir.file(tag + ".jsonl");
  const auto r = run_train(job);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  return r.exit_code == 0 ? read_step_log(job.log_path) : std::vector<nlohmann::json>{};
}

// The keys and values of DeepSpeedExamples' Megatron-LM ZeRO-2 + CPU offload config
// (scripts/ds_zero2_cpu_offload_config.json): the legacy `cpu_offload`, Adam, clipping,
// dynamic fp16 scaling, Megatron's activation partitioning.
nlohmann::json megatron_zero2_offload_config() {
  return nlohmann::json::parse(R"({
    "train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1,
    "zero_optimization": {"stage": 2, "cpu_offload": true},
    "optimizer": {"type": "Adam", "params": {"lr": 0.00015}},
    "gradient_clipping": 1.0,
    "fp16": {"enabled": true, "loss_scale": 0, "loss_scale_window": 1000, "hysteresis": 2,
             "min_loss_scale": 1},
    "activation_checkpointing": {"partition_activations": true,
                                 "contiguous_memory_optimization": false},
    "wall_clock_breakdown": false
  })");
}

TEST(TrainFp16, MegatronZero2OffloadConfigRunsUnchanged) {
  TempDir dir;
  const auto rows = train_gpt_tiny(dir, "megatron", megatron_zero2_offload_config(), 12);
  ASSERT_EQ(rows.size(), 12u);
  for (const auto& row : rows) {
    ASSERT_TRUE(row.contains("loss_scale")) << row.dump();
    EXPECT_GE(row["loss_scale"].get<double>(), 1.0);
    if (!row.value("skipped", false)) {
      EXPECT_TRUE(std::isfinite(row["loss"].get<double>()));
    }
  }
  EXPECT_EQ(rows.front()["loss_scale"].get<double>(), 65536.0) << "DeepSpeed's 2^16 default";
}

// A scale far too large overflows fp16 gradients: those steps are skipped (parameters kept)
// and the scale halves after `hysteresis` overflows in a row, until steps go through.
TEST(TrainFp16, OverflowSkipsStepsAndLowersTheScale) {
  TempDir dir;
  auto config = example_config("test_gpt_exact.json");
  config["zero_optimization"]["stage"] = 2;
  config["fp16"] = {{"enabled", true}, {"initial_scale_power", 32}, {"hysteresis", 2}};
  const auto rows = train_gpt_tiny(dir, "overflow", config, 30);
  ASSERT_EQ(rows.size(), 30u);
  int skipped = 0;
  double previous = rows.front()["loss_scale"].get<double>();
  EXPECT_EQ(previous, std::ldexp(1.0, 32));
  for (const auto& row : rows) {
    const double scale = row["loss_scale"].get<double>();
    EXPECT_LE(scale, previous) << "the scale only falls within the window";
    previous = scale;
    skipped += row.value("skipped", false) ? 1 : 0;
  }
  EXPECT_GT(skipped, 0) << "2^32 must overflow fp16 gradients";
  EXPECT_FALSE(rows.back().value("skipped", false))
      << "the scale must come down to where steps pass";
  EXPECT_LT(previous, std::ldexp(1.0, 32));
}

TEST(TrainFp16, LearnsAsBf16Does) {
  TempDir dir;
  double last[2];
  for (int fp16 = 0; fp16 < 2; ++fp16) {
    auto config = example_config("test_gpt_exact.json");
    config["optimizer"]["params"]["lr"] = 3e-3;
    config["scheduler"]["params"]["total_num_steps"] = kSteps;
    config["zero_optimization"]["stage"] = 2;
    config["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
    if (fp16) {
      config["fp16"] = {{"enabled", true}, {"initial_scale_power", kInitialScalePower}};
    } else {
      config["bf16"] = {{"enabled", true}};
    }
    const auto rows = train_gpt_tiny(dir, fp16 ? "fp16" : "bf16", config, kSteps);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps));
    last[fp16] = mean_last_loss(rows, 10);
    int skipped = 0;
    for (const auto& row : rows) skipped += row.value("skipped", false) ? 1 : 0;
    if (fp16)
      std::printf("fp16: %d of %lld steps skipped (overflow)\n", skipped,
                  static_cast<long long>(kSteps));
    EXPECT_LT(last[fp16], kLearnedFraction * rows.front()["loss"].get<double>());
  }
  std::printf(
      "gpt tiny, %lld steps, ZeRO-2 + cpu offload: last-10 mean loss bf16 %.4f, fp16 %.4f\n",
      static_cast<long long>(kSteps), last[0], last[1]);
  EXPECT_LE(std::abs(last[1] - last[0]), kFp16VsBf16LossRelTol * last[0]);
}

}  // namespace
}  // namespace zoff::cli_test::train_fp16_test
