// `zoff train --save-model FILE.safetensors` streams the model out unit by unit, and
// `zoff generate` runs it from that file, whole or with each unit read as it is reached.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "cli_test_support.h"
#include "zoff/checkpoint/safetensors_reader.h"

namespace zoff::cli_test::model_file_test {
namespace {

TEST(ModelFile, Stage3OnDiskSavesTheCheckpointsWeightsInBf16AndGenerates) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("nvme"));
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.world = 2;
  job.steps = 4;
  job.seed = 3;
  job.config_path = dir.file("config.json");
  job.save_model_path = dir.file("model.safetensors");
  job.extra = {"--save", dir.file("ckpt"), "--eval-every", "0"};
  write_text(job.config_path, on_disk_stage3_config(dir.file("nvme")).dump(2));
  const auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto e = run_zoff({"export", dir.file("ckpt"), "--out", dir.file("fp32.safetensors")});
  ASSERT_EQ(e.exit_code, 0) << describe(e);

  // The bf16 parameters the run computed with are its fp32 master rounded to nearest even.
  checkpoint::SafetensorsFile model(dir.file("model.safetensors"));
  checkpoint::SafetensorsFile fp32(dir.file("fp32.safetensors"));
  EXPECT_EQ(model.names(), fp32.names());
  EXPECT_EQ(model.metadata().at("preset"), "tiny");
  EXPECT_EQ(model.metadata().at("step"), "4");
  for (const auto& name : model.names()) {
    const auto got = model.read(name);
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16) << name;
    EXPECT_TRUE(torch::equal(got, fp32.read(name).to(torch::kBFloat16))) << name;
  }

  // Streamed (buffered or direct reads) or whole, the same text.
  const std::vector<std::vector<std::string>> ways{
      {"--stream-weights", "yes"},
      {"--stream-weights", "no"},
      {"--stream-weights", "yes", "--direct-reads", "yes"}};
  std::vector<std::string> texts;
  for (const auto& way : ways) {
    std::vector<std::string> args{"generate", "--checkpoint", dir.file("model.safetensors"),
                                  "--prompt", "Hello",        "--tokens",
                                  "30",       "--seed",       "2"};
    args.insert(args.end(), way.begin(), way.end());
    const auto g = run_zoff(args);
    ASSERT_EQ(g.exit_code, 0) << describe(g);
    texts.push_back(g.out);
    if (way[1] == "yes") {
      EXPECT_NE(g.err.find("weights streamed from"), std::string::npos) << g.err;
      // Direct where the file system allows it (not tmpfs), buffered by default for a file
      // this small.
      EXPECT_NE(g.err.find(way.size() > 2 ? "reads)" : "(buffered reads)"), std::string::npos)
          << g.err;
    }
  }
  EXPECT_EQ(texts[0].size(), 5u + 30u + 1u) << texts[0];
  EXPECT_EQ(texts[0], texts[1]);
  EXPECT_EQ(texts[0], texts[2]);
}

TEST(ModelFile, GenerateRefusesWhatItCannotRunInOneLine) {
  TempDir dir;
  TrainJob job;  // an mlp: a model file generate cannot continue text with
  job.config_path = dir.file("config.json");
  job.save_model_path = dir.file("mlp.safetensors");
  write_text(job.config_path, R"({"train_batch_size": 4})");
  ASSERT_EQ(run_train(job).exit_code, 0);
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<Case> cases{
      {{"--checkpoint", dir.file("mlp.safetensors")}, "model 'mlp'"},
      {{"--checkpoint", dir.file("mlp.safetensors"), "--stream-weights", "maybe"}, "maybe"},
      {{"--checkpoint", dir.file("mlp.safetensors"), "--direct-reads", "always"},
       "--direct-reads always"},
      {{"--checkpoint", dir.file(""), "--stream-weights", "yes"}, "--stream-weights yes needs"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"generate", "--prompt", "x"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    expect_one_line_refusal(run_zoff(args, {}, 60), {c.names});
  }
}

}  // namespace
}  // namespace zoff::cli_test::model_file_test
