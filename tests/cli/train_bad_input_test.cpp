// `zoff train` refuses bad configs and bad flags: exit 2 and one "zoff: error:" line naming the
// key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::train_bad_input_test {
namespace {

// A bad input is found before any training: well inside this even on a loaded machine.
constexpr double kRefuseTimeoutSeconds = 60;
constexpr int kUsageExitCode = 2;

struct BadInput {
  std::string name;
  // Config file text; "" means the file is not there at all.
  std::string config;
  std::vector<std::string> flags;  // beyond `train --config FILE --threads 1`
  std::vector<std::string> env;    // NAME=value
  std::vector<std::string> named;  // substrings the error line must contain
};

std::string case_name(const testing::TestParamInfo<BadInput>& info) { return info.param.name; }
void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

// A config that trains: the bad ones differ from it in one place.
const char* const kGood =
    R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

// Runs the case and checks the refusal; returns the error line.
std::string expect_refused(const BadInput& c, const std::string& config_path) {
  std::vector<std::string> args = {"train", "--config", config_path, "--threads", "1"};
  args.insert(args.end(), c.flags.begin(), c.flags.end());
  const ProcessResult r = run_zoff(args, c.env, kRefuseTimeoutSeconds);
  EXPECT_EQ(r.exit_code, kUsageExitCode) << describe(r);
  const auto lines = lines_of(r.err);
  EXPECT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << describe(r);
  const std::string line = lines.empty() ? "" : lines.front();
  EXPECT_EQ(line.rfind("zoff: error:", 0), 0u) << line;
  for (const auto& s : c.named)
    EXPECT_NE(line.find(s), std::string::npos) << "'" << s << "' not in: " << line;
  return line;
}

class TrainRefusesBadConfig : public testing::TestWithParam<BadInput> {};

TEST_P(TrainRefusesBadConfig, ExitsTwoWithOneLineNamingTheKey) {
  const BadInput& c = GetParam();
  TempDir dir;
  const std::string path = dir.file("bad config.json");  // a space: paths are quoted, not split
  if (!c.config.empty()) write_text(path, c.config);
  const std::string line = expect_refused(c, path);
  // Every config error says which file it is about.
  EXPECT_NE(line.find(path), std::string::npos) << line;
  std::printf("[refused] %-32s %s\n", c.name.c_str(), line.c_str());
}

std::vector<BadInput> bad_configs() {
  const std::string batch = R"("train_batch_size": 12, "train_micro_batch_size_per_gpu": 2, )";
  const std::string adamw = R"("optimizer": {"type": "AdamW", "params": {"lr": 1e-3}})";
  return {
      {"MalformedJson", "{\n  \"train_batch_size\": 12,,\n}", {}, {}, {"malformed JSON", "line 2"}},
      {"TopLevelNotAnObject", "[12, 2]", {}, {}, {"top level"}},
      {"DuplicateKey", "{" + batch + R"("train_batch_size": 6})", {}, {}, {"train_batch_size"}},
      {"UnknownStage",
       "{" + batch + R"("zero_optimization": {"stage": 7}})",
       {},
       {},
       {"zero_optimization.stage", "7"}},
      {"StageAsString",
       "{" + batch + R"("zero_optimization": {"stage": "2"}})",
       {},
       {},
       {"zero_optimization.stage", "\"2\""}},
      {"ParamOffloadToNvmeNotImplemented",
       "{" + batch + R"("zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
       {},
       {},
       {"zero_optimization.offload_param.device", "nvme"}},
      {"NegativeLr",
       "{" + batch + R"("optimizer": {"type": "AdamW", "params": {"lr": -0.1}}})",
       {},
       {},
       {"optimizer.params.lr", "-0.1"}},
      {"BetaOutOfRange",
       "{" + batch + R"("optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.5]}}})",
       {},
       {},
       {"optimizer.params.betas", "1.5"}},
      {"UnknownOptimizer",
       "{" + batch + R"("optimizer": {"type": "Lamb"}})",
       {},
       {},
       {"optimizer.type", "Lamb"}},
      {"SgdWithoutLr",
       "{" + batch + R"("optimizer": {"type": "SGD", "params": {}}})",
       {},
       {},
       {"optimizer.params.lr"}},
      {"BatchNotDivisible",
       R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})",
       {},
       {},
       {"train_batch_size", "10"}},
      {"BatchInconsistentWithWorldSize",
       R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 4,
           "gradient_accumulation_steps": 2})",
       {},
       {"RANK=0", "WORLD_SIZE=2"},
       {"train_batch_size", "world size (2)"}},
      {"MicroBatchZero",
       R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 0})",
       {},
       {},
       {"train_micro_batch_size_per_gpu", "0"}},
      {"NoBatchSize",
       "{" + adamw + "}",
       {},
       {},
       {"train_batch_size", "train_micro_batch_size_per_gpu"}},
      {"DecaySchedulerWithoutTotalSteps",
       "{" + batch + adamw +
           R"(, "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 5}}})",
       {},
       {},
       {"scheduler.params.total_num_steps", "WarmupDecayLR"}},
      {"UnknownScheduler",
       "{" + batch + adamw + R"(, "scheduler": {"type": "OneCycle"}})",
       {},
       {},
       {"scheduler.type", "OneCycle"}},
      {"BadWarmupType",
       "{" + batch + adamw +
           R"(, "scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cubic"}}})",
       {},
       {},
       {"scheduler.params.warmup_type", "cubic"}},
      {"Bf16AndFp16",
       "{" + batch + R"("bf16": {"enabled": true}, "fp16": {"enabled": true}})",
       {},
       {},
       {"bf16.enabled", "fp16.enabled"}},
      {"NegativeGradientClipping",
       "{" + batch + R"("gradient_clipping": -1.0})",
       {},
       {},
       {"gradient_clipping", "-1"}},
      {"ReduceBucketSizeZero",
       "{" + batch + R"("zero_optimization": {"reduce_bucket_size": 0}})",
       {},
       {},
       {"zero_optimization.reduce_bucket_size", "0"}},
      {"NvmeOffloadWithoutPath",
       "{" + batch +
           R"("zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})",
       {},
       {},
       {"zero_optimization.offload_optimizer", "nvme_path"}},
      {"ConfigFileMissing", "", {}, {}, {"cannot open"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Config, TrainRefusesBadConfig, testing::ValuesIn(bad_configs()),
                         case_name);

class TrainRefusesBadFlags : public testing::TestWithParam<BadInput> {};

TEST_P(TrainRefusesBadFlags, ExitsTwoWithOneLineNamingTheFlag) {
  const BadInput& c = GetParam();
  TempDir dir;
  const std::string path = dir.file("good.json");
  write_text(path, kGood);
  const std::string line = expect_refused(c, path);
  std::printf("[refused] %-32s %s\n", c.name.c_str(), line.c_str());
}

std::vector<BadInput> bad_flags() {
  return {
      {"StepsZero", "", {"--steps", "0"}, {}, {"--steps", "0"}},
      {"StepsNotANumber", "", {"--steps", "many"}, {}, {"--steps", "many"}},
      {"UnknownModel", "", {"--model", "nope"}, {}, {"nope", "mlp"}},
      {"UnknownGptPreset", "", {"--model", "gpt", "--preset", "huge"}, {}, {"huge"}},
      {"UnknownMlpPreset", "", {"--model", "mlp", "--preset", "huge"}, {}, {"huge"}},
      {"ReferenceUnderWorldSizeTwo",
       "",
       {"--reference"},
       {"RANK=0", "WORLD_SIZE=2"},
       {"--reference", "WORLD_SIZE"}},
      {"UnknownOptimizerBackend",
       "",
       {"--optimizer-backend", "gpu"},
       {},
       {"--optimizer-backend", "gpu"}},
      {"LogInMissingDirectory",
       "",
       {"--log", "/nonexistent-zoff-dir/log.jsonl"},
       {},
       {"--log", "/nonexistent-zoff-dir/log.jsonl"}},
      {"BadWorldSize", "", {}, {"RANK=0", "WORLD_SIZE=zero"}, {"WORLD_SIZE", "zero"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Flags, TrainRefusesBadFlags, testing::ValuesIn(bad_flags()), case_name);

// The config flag itself is required.
TEST(TrainRefusesBadFlags, MissingConfigFlag) {
  const ProcessResult r = run_zoff({"train", "--model", "mlp"}, {}, kRefuseTimeoutSeconds);
  EXPECT_EQ(r.exit_code, kUsageExitCode) << describe(r);
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_EQ(lines[0].rfind("zoff: error:", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("--config"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace zoff::cli_test::train_bad_input_test
