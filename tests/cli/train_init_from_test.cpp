// `zoff train --init-from`: a run starts from exported weights (safetensors) or a checkpoint's;
// mismatched or damaged files are one line, exit 2.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::train_init_from_test {
namespace {

// lr 0: the step leaves the weights as loaded, so the saved model shows what was loaded.
const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.0}}})";
const char* const kTrainConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}})";

TrainJob gpt_job(const TempDir& dir, const std::string& tag, const std::string& config) {
  write_text(dir.file(tag + ".json"), config);
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file(tag + ".json");
  job.steps = 1;
  job.seed = 7;
  job.log_path = dir.file(tag + ".jsonl");
  job.save_model_path = dir.file(tag + ".pt");
  job.extra = {"--eval-every", "100"};
  return job;
}

TEST(TrainInitFrom, StartsFromExportedOrCheckpointWeights) {
  TempDir dir;
  auto source = gpt_job(dir, "source", kTrainConfig);
  source.steps = 3;
  source.extra.insert(source.extra.end(), {"--save", dir.file("ckpt")});
  auto r = run_train(source);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run_zoff({"export", dir.file("ckpt"), "--out", dir.file("model.safetensors")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  auto from_file = gpt_job(dir, "file", kConfig);
  from_file.extra.insert(from_file.extra.end(), {"--init-from", dir.file("model.safetensors")});
  r = run_train(from_file);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto from_dir = gpt_job(dir, "dir", kConfig);
  from_dir.extra.insert(from_dir.extra.end(), {"--init-from", dir.file("ckpt")});
  r = run_train(from_dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto fresh = gpt_job(dir, "fresh", kConfig);
  r = run_train(fresh);
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  // The weights loaded are the source run's final ones, bit for bit, from either form.
  const auto want = load_model_archive(source.save_model_path);
  for (const auto* job : {&from_file, &from_dir}) {
    const auto got = load_model_archive(job->save_model_path);
    for (const auto& [name, t] : want) EXPECT_TRUE(torch::equal(t, got.at(name))) << name;
  }
  // Same weights, same first batch: the same first-step loss; the seed's own weights differ.
  const double a = read_step_log(from_file.log_path).front()["loss"].get<double>();
  const double b = read_step_log(from_dir.log_path).front()["loss"].get<double>();
  const double c = read_step_log(fresh.log_path).front()["loss"].get<double>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(TrainInitFrom, MismatchedOrDamagedIsOneLineAndExitTwo) {
  TempDir dir;
  auto source = gpt_job(dir, "source", kTrainConfig);
  source.extra.insert(source.extra.end(), {"--save", dir.file("ckpt")});
  ASSERT_EQ(run_train(source).exit_code, 0);
  ASSERT_EQ(run_zoff({"export", dir.file("ckpt"), "--out", dir.file("m.safetensors")}).exit_code,
            0);
  write_text(dir.file("junk.safetensors"), std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  struct Case {
    std::vector<std::string> flags;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"--preset", "small", "--init-from", dir.file("m.safetensors")}, "the model's is"},
      {{"--preset", "tiny", "--init-from", dir.file("junk.safetensors")}, "header length"},
      {{"--preset", "tiny", "--init-from", dir.file("missing.safetensors")}, "cannot read"},
      {{"--preset", "tiny", "--init-from", dir.file("m.safetensors"), "--resume", dir.file("ckpt")},
       "give one"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"train",   "--model", "gpt", "--config", source.config_path,
                                     "--steps", "1"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    const auto r = run_zoff(args);
    expect_one_line_refusal(r, {c.needle});
  }
}

}  // namespace
}  // namespace zoff::cli_test::train_init_from_test
