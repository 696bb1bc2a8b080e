// `zoff train --profile FILE`: a per-op table of a span of steps after the warm-up, with
// LibTorch's ops and the engine's phases; bad values are one line, exit 2.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::train_profile_test {
namespace {

const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
        "bf16": {"enabled": true},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

TrainJob profile_job(const TempDir& dir, int64_t steps, std::vector<std::string> extra) {
  write_text(dir.file("c.json"), kConfig);
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file("c.json");
  job.steps = steps;
  job.world = 2;
  job.extra = std::move(extra);
  job.extra.push_back("--no-eval");
  return job;
}

TEST(TrainProfile, WritesATableOfOpsAndEnginePhasesPerStep) {
  TempDir dir;
  const std::string table = dir.file("profile.txt");
  auto r = run_train(profile_job(dir, 6, {"--profile", table, "--profile-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto lines = lines_of(read_text(table));
  ASSERT_GT(lines.size(), 10u) << read_text(table);
  EXPECT_EQ(lines[0].rfind("2 steps, ", 0), 0u) << lines[0];
  const std::string text = read_text(table);
  // The gpt's matrix products, the stage-2 gradient reduce-scatter and the fused step. The
  // engine's scopes are listed however little time they take (over shared memory the tiny
  // model's wait for the reduce-scatter is a few microseconds).
  for (const char* op : {"aten::mm", "zoff::wait_gradient_collective", "zoff::stage_grad",
                         "zoff::optimizer_step", "(not in the ops above)"}) {
    EXPECT_NE(text.find(op), std::string::npos) << op << "\n" << text;
  }
  EXPECT_FALSE(std::filesystem::exists(table + ".tmp"));
}

TEST(TrainProfile, ARankPlaceholderGivesEachRankItsOwnTable) {
  TempDir dir;
  auto r = run_train(
      profile_job(dir, 5, {"--profile", dir.file("p.{rank}.txt"), "--profile-steps", "1"}));
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* name : {"p.0.txt", "p.1.txt"}) {
    EXPECT_EQ(read_text(dir.file(name)).rfind("1 steps, ", 0), 0u) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("p.{rank}.txt")));
}

TEST(TrainProfile, BadValuesAreOneLineAndExitTwo) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("a_dir"));
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases{
      {{"--profile", dir.file("p.txt"), "--profile-steps", "4"},
       {"--profile-steps 4", "--steps 5"}},
      {{"--profile", dir.file("a_dir")}, {"--profile", "a_dir"}},
      {{"--profile", dir.file("p.txt"), "--profile-steps", "0"}, {"--profile-steps", "0"}},
      {{"--profile", dir.file("{rank}/p.txt")}, {"--profile", "{rank}", "directory"}},
  };
  for (const auto& [flags, named] : cases) {
    auto job = profile_job(dir, 5, flags);
    job.world = 1;
    expect_one_line_refusal(run_train(job), named);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("p.txt")));
}

}  // namespace
}  // namespace zoff::cli_test::train_profile_test
