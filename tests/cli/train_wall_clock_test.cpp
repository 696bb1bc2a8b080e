// `wall_clock_breakdown` (DeepSpeed's config key): every step's phase times in the step log,
// and a times line on the console every steps_per_print steps; off, neither appears.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::train_wall_clock_test {
namespace {

std::string config_text(bool breakdown) {
  return std::string(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
        "steps_per_print": 2, "bf16": {"enabled": true},
        "zero_optimization": {"stage": 2},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "wall_clock_breakdown": )") +
         (breakdown ? "true}" : "false}");
}

// Runs 4 steps of the tiny gpt on 2 ranks; returns the step rows of the log.
std::vector<nlohmann::json> run_rows(const TempDir& dir, bool breakdown, ProcessResult* r) {
  write_text(dir.file("c.json"), config_text(breakdown));
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file("c.json");
  job.steps = 4;
  job.world = 2;
  job.log_path = dir.file("log.jsonl");
  job.extra = {"--no-eval"};
  *r = run_train(job);
  std::vector<nlohmann::json> rows;
  if (r->exit_code != 0) return rows;
  for (const auto& line : lines_of(read_text(job.log_path))) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) rows.push_back(std::move(j));
  }
  return rows;
}

TEST(TrainWallClock, LogsPhaseTimesEachStepAndPrintsThemEveryStepsPerPrint) {
  TempDir dir;
  ProcessResult r;
  const auto rows = run_rows(dir, true, &r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) {
    ASSERT_TRUE(row.contains("times_ms")) << row.dump();
    const auto& t = row.at("times_ms");
    EXPECT_EQ(t.size(), 10u) << t.dump();
    const auto ms = [&](const char* key) { return t.at(key).get<double>(); };
    // Every phase ran: 2 ranks at stage 2 all-gather the updated parameters.
    for (const char* key : {"forward", "backward", "step", "grad_norm", "optimizer", "allgather"}) {
      EXPECT_GT(ms(key), 0.0) << key << " " << t.dump();
    }
    EXPECT_LE(ms("backward_reduce"), ms("backward")) << t.dump();
    EXPECT_LE(ms("grad_norm") + ms("optimizer") + ms("allgather"), ms("step")) << t.dump();
    // Nothing on disk: no waits for it.
    for (const char* key : {"io_wait_params", "io_wait_grad_window", "io_wait_optimizer"}) {
      EXPECT_EQ(ms(key), 0.0) << key << " " << t.dump();
    }
  }
  EXPECT_EQ((r.out + r.err).find("I/O wait"), std::string::npos) << describe(r);
  const std::string console = r.out + r.err;
  for (int step : {2, 4}) {
    const std::string line = "step " + std::to_string(step) + " | time (ms): forward ";
    EXPECT_NE(console.find(line), std::string::npos) << line << "\n" << console;
  }
  for (int step : {1, 3}) {
    const std::string line = "step " + std::to_string(step) + " | time (ms)";
    EXPECT_EQ(console.find(line), std::string::npos) << line << "\n" << console;
  }
}

TEST(TrainWallClock, OffByDefaultLeavesLogAndConsoleAsTheyWere) {
  TempDir dir;
  ProcessResult r;
  const auto rows = run_rows(dir, false, &r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& row : rows) EXPECT_FALSE(row.contains("times_ms")) << row.dump();
  EXPECT_EQ((r.out + r.err).find("time (ms)"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace zoff::cli_test::train_wall_clock_test
