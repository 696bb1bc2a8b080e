// `zoff train --save/--resume` continues exactly, and `zoff generate` reads what it saved.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test {
namespace {

constexpr int64_t kStopAt = 10;  // the interrupted run stops here...
constexpr int64_t kTotal = 60;   // ...and the resumed one goes on to here: 50 steps
constexpr uint64_t kSeed = 3;

// fp32, world 2, stage 2: the losses after resuming equal the uninterrupted run's, bit
// for bit, and so do the final parameters.
TEST(TrainResume, FiftyStepsAfterResumeEqualTheUninterruptedRun) {
  TempDir dir;
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 2;
  const std::string config_path = dir.file("config.json");
  write_text(config_path, config.dump(2));

  TrainJob whole;
  whole.config_path = config_path;
  whole.steps = kTotal;
  whole.seed = kSeed;
  whole.world = 2;
  whole.log_path = dir.file("whole.jsonl");
  whole.save_model_path = dir.file("whole.pt");
  auto r = run_train(whole);
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  TrainJob first = whole;
  first.steps = kStopAt;
  first.log_path = dir.file("first.jsonl");
  first.save_model_path = "";
  first.extra = {"--save", dir.file("ckpt"), "--save-every", "5"};
  r = run_train(first);
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  TrainJob second = whole;
  second.log_path = dir.file("second.jsonl");
  second.save_model_path = dir.file("second.pt");
  second.extra = {"--resume", dir.file("ckpt")};
  r = run_train(second);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;

  const auto a = read_step_log(whole.log_path);
  const auto b = read_step_log(second.log_path);
  ASSERT_EQ(a.size(), static_cast<size_t>(kTotal));
  ASSERT_EQ(b.size(), static_cast<size_t>(kTotal - kStopAt));
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i]["step"].get<int64_t>(), kStopAt + 1 + static_cast<int64_t>(i));
    EXPECT_EQ(b[i]["loss"].get<double>(), a[kStopAt + i]["loss"].get<double>()) << "step " << i;
  }
  const auto pa = load_model_archive(whole.save_model_path);
  const auto pb = load_model_archive(second.save_model_path);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& [name, t] : pa) {
    ASSERT_TRUE(pb.count(name)) << name;
    EXPECT_TRUE(torch::equal(t, pb.at(name))) << name;
  }
}

TEST(TrainResume, ResumingAtAnotherWorldSizeIsRefusedClearly) {
  TempDir dir;
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 1;
  TrainJob job;
  job.config_path = dir.file("config.json");
  write_text(job.config_path, config.dump(2));
  job.steps = 2;
  job.world = 2;
  job.extra = {"--save", dir.file("ckpt")};
  auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  job.world = 3;
  job.steps = 4;
  job.extra = {"--resume", dir.file("ckpt")};
  r = run_train(job);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("resharding is not supported"), std::string::npos) << describe(r);
}

// What `zoff train --sample` printed at the end equals what `zoff generate` prints from
// the checkpoint that run saved (same prompt, length, sampling settings and seed).
TEST(Generate, FromACheckpointEqualsTheTrainingRunsSample) {
  TempDir dir;
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file("config.json");
  write_text(job.config_path, example_config("test_gpt_exact.json").dump(2));
  job.steps = 3;
  job.seed = 5;
  job.extra = {"--save", dir.file("ckpt"), "--sample", "Hello", "--sample-tokens", "40"};
  auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto start = r.out.find("--- sample ---\n");
  ASSERT_NE(start, std::string::npos) << r.out;
  const auto end = r.out.find("\n--------------", start);
  const std::string sampled = r.out.substr(start + 15, end - start - 15);
  ASSERT_EQ(sampled.size(), 40u);

  auto g = run_zoff({"generate", "--checkpoint", dir.file("ckpt"), "--prompt", "Hello", "--tokens",
                     "40", "--seed", "5"},
                    {}, kRunTimeoutSeconds);
  ASSERT_EQ(g.exit_code, 0) << describe(g);
  EXPECT_EQ(g.out, "Hello" + sampled + "\n");

  auto bad = run_zoff({"generate", "--checkpoint", dir.file("nope"), "--prompt", "x"}, {}, 60);
  EXPECT_EQ(bad.exit_code, 2) << describe(bad);
  EXPECT_NE(bad.err.find("nope"), std::string::npos);
}

}  // namespace
}  // namespace zoff::cli_test
