// `zoff train --context N`: a gpt preset trained at another context; the checkpoint carries
// it to resume and generate; bad values are one line, exit 2.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::train_context_test {
namespace {

const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";
constexpr int64_t kContext = 48;  // not the tiny preset's 128

TrainJob context_job(const TempDir& dir, int64_t context, int64_t steps) {
  write_text(dir.file("c.json"), kConfig);
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file("c.json");
  job.steps = steps;
  job.log_path = dir.file("run.jsonl");
  job.extra = {"--eval-every", "100", "--save", dir.file("ckpt")};
  if (context > 0) {
    job.extra.push_back("--context");
    job.extra.push_back(std::to_string(context));
  }
  return job;
}

TEST(TrainContext, WindowsHaveTheGivenLengthAndTheCheckpointKeepsIt) {
  TempDir dir;
  auto job = context_job(dir, kContext, 2);
  auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto log = read_step_log(job.log_path);
  ASSERT_EQ(log.size(), 2u);
  // tokens per sample = the context: each window is kContext bytes long.
  const double per_sample =
      log.back()["tokens_per_s"].get<double>() / log.back()["samples_per_s"].get<double>();
  EXPECT_NEAR(per_sample, static_cast<double>(kContext), 1e-6 * kContext);
  // generate rebuilds the model at the checkpoint's context (another position table).
  r = run_zoff({"generate", "--checkpoint", dir.file("ckpt"), "--prompt", "The ", "--tokens", "8",
                "--threads", "1"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  // Resuming with the preset's context is refused naming both.
  auto other = context_job(dir, 0, 3);
  other.extra.push_back("--resume");
  other.extra.push_back(dir.file("ckpt"));
  r = run_train(other);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("--context 48, this job has 0"), std::string::npos) << describe(r);
  // The same context resumes.
  auto same = context_job(dir, kContext, 3);
  same.extra.push_back("--resume");
  same.extra.push_back(dir.file("ckpt"));
  r = run_train(same);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
}

TEST(TrainContext, BadValuesAreOneLineAndExitTwo) {
  TempDir dir;
  write_text(dir.file("c.json"), kConfig);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", "gpt", "--context", "0"}, "--context"},
      {{"--model", "gpt", "--context", "-3"}, "--context"},
      {{"--model", "gpt", "--context", "2000000"}, "--context 2000000"},
      {{"--model", "mlp", "--context", "16"}, "--context 16"},
  };
  for (const auto& [flags, needle] : cases) {
    std::vector<std::string> args = {"train", "--config", dir.file("c.json"), "--steps", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_zoff(args);
    expect_one_line_refusal(r, {needle});
  }
}

}  // namespace
}  // namespace zoff::cli_test::train_context_test
