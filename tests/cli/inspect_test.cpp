// `zoff inspect`: a checkpoint's contents and verified checksums; damage is one line, exit 2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::inspect_test {
namespace {

const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

std::string saved_checkpoint(const TempDir& dir) {
  write_text(dir.file("c.json"), kConfig);
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file("c.json");
  job.steps = 2;
  job.world = 2;
  job.extra = {"--eval-every", "100", "--save", dir.file("ckpt")};
  const auto r = run_train(job);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  return dir.file("ckpt");
}

TEST(Inspect, PrintsWhatTheCheckpointHoldsAndVerifiesIt) {
  TempDir dir;
  const auto ckpt = saved_checkpoint(dir);
  auto r = run_zoff({"inspect", ckpt, "--tensors"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* want :
       {"verified", "step 2 (2 applied), gpt tiny", "written by 2 rank(s) at ZeRO stage 2",
        "optimizer adamw (exp_avg, exp_avg_sq)", "rank_0.bin", "rank_1.bin", "param  wte.weight"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  r = run_zoff({"inspect", ckpt, "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_EQ(j["numel"], 1040768);  // gpt tiny
  EXPECT_EQ(j["files"].size(), 2u);
}

TEST(Inspect, CorruptOrMissingIsOneLineAndExitTwo) {
  TempDir dir;
  const auto ckpt = saved_checkpoint(dir);
  const std::string victim = ckpt + "/step_2/rank_1.bin";
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(300);
    f.put('\x7f');
  }
  auto r = run_zoff({"inspect", ckpt});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("rank_1.bin: corrupt"), std::string::npos) << describe(r);
  EXPECT_EQ(lines_of(r.err).size(), 1u) << describe(r);
  r = run_zoff({"inspect", dir.file("nothing")});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(lines_of(r.err).size(), 1u) << describe(r);
}

}  // namespace
}  // namespace zoff::cli_test::inspect_test
