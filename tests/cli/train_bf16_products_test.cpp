// `zoff train` in bf16 with LibTorch's bf16 GEMM and with widened (fp32, rounded once)
// products: the banner names the choice, the losses agree, and a bad choice is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::train_bf16_products_test {
namespace {

constexpr int64_t kSteps = 5;
// Both are bf16 GEMMs with fp32 accumulation rounded once to bf16; they differ in the order
// of the additions, so single bf16 roundings (2^-8 relative) differ and compound over the
// steps. Measured on this model: 2.4e-5 of the loss (2026-11-27).
constexpr double kLossRelTol = 1e-3;

struct Bf16Run {
  ProcessResult result;
  std::vector<nlohmann::json> steps;
};

Bf16Run train_gpt_bf16(const TempDir& dir, const std::string& products) {
  nlohmann::json config = example_config("test_gpt_exact.json");
  config["bf16"] = {{"enabled", true}};
  config["zero_optimization"]["stage"] = 2;
  config["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file(products + ".json");
  job.log_path = dir.file(products + ".jsonl");
  job.steps = kSteps;
  job.seed = 3;
  write_text(job.config_path, config.dump(2));
  Bf16Run run;
  run.result = run_zoff(train_args(job), {"ZOFF_BF16_PRODUCTS=" + products}, kRunTimeoutSeconds);
  if (run.result.exit_code == 0) run.steps = read_step_log(job.log_path);
  return run;
}

TEST(TrainBf16Products, WidenedAndNativeGemmsGiveTheSameLosses) {
  TempDir dir;
  const auto native = train_gpt_bf16(dir, "native");
  const auto widened = train_gpt_bf16(dir, "widened");
  ASSERT_EQ(native.result.exit_code, 0) << describe(native.result);
  ASSERT_EQ(widened.result.exit_code, 0) << describe(widened.result);
  EXPECT_NE(native.result.out.find("bf16 matrix products: native"), std::string::npos);
  EXPECT_NE(widened.result.out.find("bf16 matrix products: widened"), std::string::npos);
  ASSERT_EQ(native.steps.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(widened.steps.size(), static_cast<size_t>(kSteps));
  double worst = 0;
  for (int64_t s = 0; s < kSteps; ++s) {
    const double a = native.steps[s].at("loss").get<double>();
    const double b = widened.steps[s].at("loss").get<double>();
    EXPECT_NEAR(b, a, kLossRelTol * std::abs(a)) << "step " << s + 1;
    worst = std::max(worst, std::abs(b - a) / std::abs(a));
  }
  std::printf("[bf16 products] gpt tiny, %lld steps: widened vs native loss, worst %.3g relative\n",
              static_cast<long long>(kSteps), worst);
}

TEST(TrainBf16Products, AnUnknownChoiceIsRefusedNamingIt) {
  TempDir dir;
  const auto run = train_gpt_bf16(dir, "fastest");
  expect_one_line_refusal(run.result, {"ZOFF_BF16_PRODUCTS=fastest", "native"});
}

}  // namespace
}  // namespace zoff::cli_test::train_bf16_products_test
