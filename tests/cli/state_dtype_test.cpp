// optimizer.state_dtype end to end: `zoff train` logs the stored optimizer bytes in `mem`,
// `zoff estimate --state-dtype` predicts the same bytes, and bad combinations exit 2.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::state_dtype_test {
namespace {

constexpr double kRefuseTimeoutSeconds = 60;
constexpr int kUsageExitCode = 2;

// The mlp's config at stage 2 with the cpu offload tier and the given state dtype.
nlohmann::json state_config(const std::string& dtype) {
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 2;
  config["zero_optimization"]["offload_optimizer"] = {{"device", "cpu"}};
  config["optimizer"]["state_dtype"] = dtype;
  return config;
}

// One rank: its shard is every parameter, so psi = shard elements and the estimate's
// offload optimizer bytes (fp32 master + m + v as stored) are the engine's `mem` optim.
TEST(StateDtype, EstimateMatchesTheLoggedOptimizerBytes) {
  TempDir dir;
  for (const std::string dtype : {"fp32", "bf16", "int8"}) {
    TrainJob job;
    job.config_path = dir.file(dtype + ".json");
    job.log_path = dir.file(dtype + ".jsonl");
    job.steps = 2;
    job.seed = 1;
    write_text(job.config_path, state_config(dtype).dump(2));
    const auto r = run_train(job);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const auto steps = read_step_log(job.log_path);
    ASSERT_EQ(steps.size(), 2u);
    const auto logged = steps.back().at("mem").at("optim").get<int64_t>();
    // psi from the fp32 parameters the log also reports (4 bytes each, no padding at 1 rank).
    const auto psi = steps.back().at("mem").at("params").get<int64_t>() / 4;
    const auto est =
        run_zoff({"estimate", "--params", std::to_string(psi), "--ranks", "1", "--offload", "cpu",
                  "--precision", "fp32", "--state-dtype", dtype, "--json"});
    ASSERT_EQ(est.exit_code, 0) << describe(est);
    const auto j = nlohmann::json::parse(est.out);
    EXPECT_EQ(j.at("state_dtype"), dtype);
    EXPECT_EQ(j.at("stages").at("2").at("offload").at("optim").get<int64_t>(), logged) << dtype;
    const double state_per_param = static_cast<double>(logged - 4 * psi) / static_cast<double>(psi);
    std::printf("%s states: mem optim %lld bytes for %lld params: 4 (master) + %.4f B/param\n",
                dtype.c_str(), static_cast<long long>(logged), static_cast<long long>(psi),
                state_per_param);
    EXPECT_LE(state_per_param, dtype == "fp32" ? 8.0 : dtype == "bf16" ? 4.0 : 2.01) << dtype;
    EXPECT_GE(state_per_param, dtype == "fp32" ? 8.0 : dtype == "bf16" ? 4.0 : 2.0) << dtype;
  }
}

// Exit 2 and one "zoff: error:" line containing each of `named`.
void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& named) {
  const ProcessResult r = run_zoff(args, {}, kRefuseTimeoutSeconds);
  EXPECT_EQ(r.exit_code, kUsageExitCode) << describe(r);
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_EQ(lines[0].rfind("zoff: error:", 0), 0u) << lines[0];
  for (const auto& s : named) {
    EXPECT_NE(lines[0].find(s), std::string::npos) << "'" << s << "' not in: " << lines[0];
  }
}

TEST(StateDtype, BadCombinationsExitTwoWithOneLine) {
  TempDir dir;
  auto train = [&](const nlohmann::json& config, const std::string& tag,
                   const std::vector<std::string>& flags) {
    const std::string path = dir.file(tag + ".json");
    write_text(path, config.dump(2));
    std::vector<std::string> args = {"train",   "--model", "mlp",       "--config", path,
                                     "--steps", "1",       "--threads", "1"};
    args.insert(args.end(), flags.begin(), flags.end());
    return args;
  };
  expect_refused(train(state_config("int4"), "bad", {}), {"optimizer.state_dtype", "\"int4\""});
  auto sgd = state_config("int8");
  sgd["optimizer"]["type"] = "SGD";
  expect_refused(train(sgd, "sgd", {}), {"\"int8\"", "sgd"});
  expect_refused(train(state_config("int8"), "torch", {"--optimizer-backend", "torch"}),
                 {"int8", "fused backend"});
  expect_refused({"estimate", "--params", "1e6", "--state-dtype", "fp16"}, {"state_dtype", "fp16"});
}

}  // namespace
}  // namespace zoff::cli_test::state_dtype_test
