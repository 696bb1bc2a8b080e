// `zoff train --attention K`: the gpt trains with either attention kernel to the same losses;
// bad values are one line, exit 2.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::train_attention_test {
namespace {

const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";
// fp32 losses of the two kernels after 3 steps: the same arithmetic summed in another order
// (tests/models/causal_attention_test.cpp measures the kernels themselves at ~5e-7).
constexpr double kLossRelTol = 1e-4;

std::vector<double> losses_with(const TempDir& dir, const std::string& kernel) {
  write_text(dir.file("c.json"), kConfig);
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file("c.json");
  job.steps = 3;
  job.log_path = dir.file(kernel + ".jsonl");
  job.extra = {"--eval-every", "100", "--attention", kernel};
  const auto r = run_train(job);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  std::vector<double> losses;
  for (const auto& step : read_step_log(job.log_path)) losses.push_back(step["loss"].get<double>());
  return losses;
}

TEST(TrainAttention, EitherKernelTrainsToTheSameLosses) {
  TempDir dir;
  const auto a = losses_with(dir, "materialized");
  const auto b = losses_with(dir, "flash");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], kLossRelTol * a[i]) << i;
  EXPECT_LT(a.back(), a.front());
}

TEST(TrainAttention, BadValuesAreOneLineAndExitTwo) {
  TempDir dir;
  write_text(dir.file("c.json"), kConfig);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", "gpt", "--attention", "fast"}, "fast"},
      {{"--model", "mlp", "--attention", "flash"}, "--attention flash"},
  };
  for (const auto& [flags, needle] : cases) {
    std::vector<std::string> args = {"train", "--config", dir.file("c.json"), "--steps", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    expect_one_line_refusal(run_zoff(args), {needle});
  }
}

}  // namespace
}  // namespace zoff::cli_test::train_attention_test
