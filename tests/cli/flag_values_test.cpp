// Flag and config values a probe found slipping through (a hang, a crash, a raw library
// message, a silent rounding): each is now one "zoff: error:" line naming the value, exit 2,
// before any work. Also: mlp trains in bf16 (its loss is computed in fp32).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::flag_values_test {
namespace {

constexpr double kRefuseTimeoutSeconds = 60;

const char* const kGood =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

struct Refusal {
  std::string name;
  std::vector<std::string> args;  // "CONFIG" is replaced by a config file holding `config`
  std::string config;             // "" = kGood
  std::vector<std::string> named;
};

void PrintTo(const Refusal& c, std::ostream* os) { *os << c.name; }

class FlagValueRefused : public testing::TestWithParam<Refusal> {};

TEST_P(FlagValueRefused, ExitsTwoWithOneLineNamingTheValue) {
  const Refusal& c = GetParam();
  TempDir dir;
  write_text(dir.file("c.json"), c.config.empty() ? kGood : c.config);
  std::vector<std::string> args = c.args;
  for (auto& a : args) {
    if (a == "CONFIG") a = dir.file("c.json");
  }
  const ProcessResult r = run_zoff(args, {}, kRefuseTimeoutSeconds);
  expect_one_line_refusal(r, c.named);
  std::printf("[refused] %-24s %s", c.name.c_str(), r.err.c_str());
}

std::vector<std::string> train(std::vector<std::string> more) {
  std::vector<std::string> args = {"train", "--config", "CONFIG", "--steps", "1"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

std::string with_lr(const std::string& lr) {
  return R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
             "optimizer": {"type": "AdamW", "params": {"lr": )" +
         lr + "}}}";
}

std::vector<Refusal> refusals() {
  const std::string huge = "99999999999999999999";
  return {
      {"ThreadsTooMany", train({"--threads", "100000"}), "", {"--threads", "100000"}},
      {"ThreadsNegative", train({"--threads", "-1"}), "", {"--threads", "-1"}},
      {"ThreadsJustAboveTheCap", train({"--threads", "4097"}), "", {"--threads", "4097"}},
      {"StepsOverflow", {"train", "--config", "CONFIG", "--steps", huge}, "", {"--steps", huge}},
      {"SeedNegative", train({"--threads", "1", "--seed", "-1"}), "", {"--seed", "-1"}},
      {"SeedOverflow", train({"--threads", "1", "--seed", huge}), "", {"--seed", huge}},
      {"EvalEveryNegative",
       train({"--threads", "1", "--eval-every", "-1"}),
       "",
       {"--eval-every", "-1"}},
      {"SampleWithMlp",
       train({"--threads", "1", "--model", "mlp", "--sample", "hi"}),
       "",
       {"--sample", "mlp"}},
      {"SampleWithCnn",
       train({"--threads", "1", "--model", "cnn", "--sample", "hi"}),
       "",
       {"--sample", "cnn"}},
      {"SampleTokensTooMany",
       train(
           {"--threads", "1", "--model", "gpt", "--sample", "a", "--sample-tokens", "1000000000"}),
       "",
       {"--sample-tokens", "1000000000"}},
      {"LrOverflow", train({"--threads", "1"}), with_lr("1e999"), {"1e999"}},
      {"AutoPlaceholder", train({"--threads", "1"}), with_lr("\"auto\""), {"lr", "Hugging Face"}},
      {"GenerateTokensTooMany",
       {"generate", "--checkpoint", "/nonexistent", "--prompt", "a", "--tokens", "100000000"},
       "",
       {"--tokens", "100000000"}},
      {"GenerateTokensNegative",
       {"generate", "--checkpoint", "/nonexistent", "--prompt", "a", "--tokens", "-5"},
       "",
       {"--tokens", "-5"}},
      {"GenerateDtypeFp16",
       {"generate", "--checkpoint", "/nonexistent", "--prompt", "a", "--dtype", "fp16"},
       "",
       {"--dtype", "fp16"}},
      {"EstimateFractionalParams", {"estimate", "--params", "1.5"}, "", {"1.5"}},
      {"EstimateHostSharedParamsOverNodes",
       {"estimate", "--params", "1e6", "--ranks", "4", "--nodes", "2", "--host-shared-params"},
       "",
       {"host_shared_params", "nodes = 2"}},
  };
}

INSTANTIATE_TEST_SUITE_P(Probe, FlagValueRefused, testing::ValuesIn(refusals()),
                         [](const testing::TestParamInfo<Refusal>& i) { return i.param.name; });

// A regression test: `--model mlp` with bf16 crashed (mse_cpu not implemented for BFloat16).
TEST(FlagValues, MlpTrainsInBf16) {
  TempDir dir;
  write_text(dir.file("c.json"), R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
      "bf16": {"enabled": true}, "zero_optimization": {"stage": 2},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})");
  const auto r = run_zoff({"train", "--model", "mlp", "--config", dir.file("c.json"), "--steps",
                           "2", "--threads", "1"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("done: 2 steps"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace zoff::cli_test::flag_values_test
