// `zoff estimate --plan` against the run it plans: disk bytes exact, peak RSS within the
// planner's stated accuracy, bad input in one line.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::plan_test {
namespace {

// The issue's 10% is measured by scripts/bench_planner.sh on gpt small, medium, xl and 6.7b
// at world 1. This smaller run at world 2 came out at 0.95-1.10 of its
// measured peak (RSS moves by some MB from run to run at this size), so the test guards the
// planner against drifting, not the issue's figure.
constexpr double kPlanRssRelTol = 0.15;

TEST(Plan, PredictsTheRunsDiskBytesAndPeakRss) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("nvme"));
  write_text(dir.file("config.json"),
             on_disk_stage3_config(dir.file("nvme"), "int8", 1000000).dump(2));
  TrainJob job;
  job.model = "gpt";
  job.preset = "small";
  job.world = 2;
  job.steps = 3;
  job.config_path = dir.file("config.json");
  job.log_path = dir.file("log.jsonl");
  job.extra = {"--eval-every", "0", "--context", "128"};
  const auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto log = read_step_log(job.log_path);
  ASSERT_EQ(log.size(), 3u);
  double peak = 0;
  for (const auto& s : log) peak = std::max(peak, s.at("peak_rss").get<double>());

  const auto p =
      run_zoff({"estimate", "--plan", "--json", "--config", dir.file("config.json"), "--model",
                "gpt", "--preset", "small", "--context", "128", "--ranks", "2"});
  ASSERT_EQ(p.exit_code, 0) << describe(p);
  const auto plan = nlohmann::json::parse(p.out);
  EXPECT_EQ(plan.at("disk_bytes").get<int64_t>(),
            log.back().at("mem").at("nvme").at("total").get<int64_t>());
  const double predicted = plan.at("host_bytes").get<double>();
  std::printf("gpt small, world 2: planned %.1f MB, measured %.1f MB (%.3f)\n", predicted / 1e6,
              peak / 1e6, predicted / peak);
  EXPECT_NEAR(predicted, peak, kPlanRssRelTol * peak)
      << "planned " << predicted / 1e6 << " MB, measured " << peak / 1e6 << " MB";
}

TEST(Plan, BadInputIsOneLineNamingIt) {
  TempDir dir;
  write_text(dir.file("config.json"), R"({"train_batch_size": 1})");
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<Case> cases{
      {{"--plan", "--model", "gpt", "--preset", "small"}, "--plan needs --config"},
      {{"--plan", "--config", dir.file("config.json"), "--params", "1B"},
       "--plan needs --model gpt"},
      {{"--plan", "--config", dir.file("nope.json"), "--model", "gpt", "--preset", "small"},
       "nope.json"},
      {{"--plan", "--config", dir.file("config.json"), "--model", "gpt", "--preset", "huge"},
       "huge"},
      {{"--config", dir.file("config.json"), "--params", "1B"}, "only with --plan"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"estimate"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    expect_one_line_refusal(run_zoff(args, {}, 60), {c.names});
  }
}

// The planner that chooses: the table, and the config it writes trains as it is.
TEST(PlanChoice, WritesTheCheapestThatFitsAsAConfigZoffTrainRuns) {
  TempDir dir;
  const auto r =
      run_zoff({"estimate", "--model", "gpt", "--preset", "tiny", "--ram", "16GiB", "--disk", "0",
                "--plan", dir.file("plan.json"), "--nvme-path", dir.file("nvme")});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("stage 2, optimizer cpu, fp32 states   <- chosen"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("wrote " + dir.file("plan.json")), std::string::npos) << r.out;
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.steps = 2;
  job.config_path = dir.file("plan.json");
  job.extra = {"--eval-every", "0"};
  const auto t = run_train(job);
  EXPECT_EQ(t.exit_code, 0) << describe(t);
}

TEST(PlanChoice, BadInputIsOneLineAndWritesNothing) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  const std::vector<Case> cases{
      {{"--model", "gpt", "--preset", "tiny", "--ram", "16GiB"}, "--ram needs --disk"},
      {{"--model", "gpt", "--preset", "tiny", "--ram", "lots", "--disk", "0"}, "--ram = 'lots'"},
      {{"--params", "1B", "--ram", "16GiB", "--disk", "0"}, "need --model gpt"},
      {{"--model", "gpt", "--preset", "tiny", "--plan", dir.file("p.json")}, "needs --ram"},
      {{"--model", "gpt", "--preset", "tiny", "--ram", "1MiB", "--disk", "0", "--plan",
        dir.file("p.json")},
       "no candidate fits"},
      {{"--model", "gpt", "--preset", "tiny", "--ram", "16GiB", "--disk", "0", "--plan",
        dir.file("missing/p.json")},
       "missing"},
      {{"--model", "gpt", "--preset", "tiny", "--ram", "16GiB", "--disk", "0", "--plan"},
       "needs a FILE"},
      {{"--model", "gpt", "--preset", "tiny", "--ram", "16GiB", "--disk", "0", "--micro-batch",
        "0"},
       "--micro-batch 0"},
      {{"--model", "gpt", "--preset", "tiny", "--ram", "16GiB", "--disk", "0", "--json"}, "--json"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"estimate"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    expect_one_line_refusal(run_zoff(args, {}, 60), {c.names});
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("p.json")));
}

}  // namespace
}  // namespace zoff::cli_test::plan_test
