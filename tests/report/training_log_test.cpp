// Tests reading JSONL training logs, including the errors a bad log must produce.
#include "zoff/report/training_log.h"

#include <gtest/gtest.h>

#include <cmath>

#include "report_test_log.h"
#include "zoff/core/error.h"

namespace zoff::report::training_log_test {
namespace {

TEST(TrainingLog, ParsesStepsEventsAndMemoryTiers) {
  const RunLog run = parse_training_log(testing::make_training_log(120), "/tmp/runs/gpt-a.jsonl");
  EXPECT_EQ(run.name, "gpt-a");
  ASSERT_EQ(run.steps.size(), 120u);
  ASSERT_EQ(run.events.size(), 2u);
  EXPECT_EQ(run.steps[0].step, 1);
  EXPECT_EQ(run.steps[119].step, 120);
  EXPECT_NEAR(run.steps[39].lr, 3e-4, 1e-12);
  EXPECT_DOUBLE_EQ(run.steps[0].mem_bytes.at("compute/params"), 250000000.0);
  EXPECT_DOUBLE_EQ(run.steps[0].mem_bytes.at("offload/optim"), 1500000000.0);
  EXPECT_EQ(run.events[1].event, "eval");
  EXPECT_EQ(run.events[1].step, 100);
  EXPECT_TRUE(run.events[1].values.count("accuracy"));
  EXPECT_FALSE(run.events[1].values.count("step"));
}

TEST(TrainingLog, FlatMemoryAndOptionalFields) {
  const RunLog run = parse_training_log(
      "{\"step\": 0, \"loss\": 1.5, \"mem\": {\"params\": 10, \"grads\": 20, \"optim\": 30}}\n"
      "\n"
      "{\"step\": 1, \"loss\": null}\n",
      "flat.jsonl");
  ASSERT_EQ(run.steps.size(), 2u);
  EXPECT_TRUE(std::isnan(run.steps[0].lr));
  EXPECT_TRUE(std::isnan(run.steps[0].tokens_per_s));
  EXPECT_TRUE(std::isnan(run.steps[1].loss));  // a diverged step is a gap, not an error
  EXPECT_DOUBLE_EQ(run.steps[0].mem_bytes.at("device/optim"), 30.0);
}

void expect_usage_error(const std::string& text, const std::string& fragment) {
  try {
    parse_training_log(text, "bad.jsonl");
    FAIL() << "expected UsageError for: " << text;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(TrainingLog, BadLinesNameTheLine) {
  const std::string good = "{\"step\": 1, \"loss\": 2.0}\n";
  expect_usage_error(good + good + "{\"step\": 3, \"loss\": \n", "bad.jsonl:3: malformed JSON");
  expect_usage_error(good + "[1, 2]\n", "bad.jsonl:2: expected a JSON object");
  expect_usage_error(good + "{\"loss\": 2.0}\n", "bad.jsonl:2: missing \"step\"");
  expect_usage_error(good + "{\"step\": 2}\n", "bad.jsonl:2: missing \"loss\"");
  expect_usage_error(good + "{\"step\": \"2\", \"loss\": 1}\n", "bad.jsonl:2: \"step\"");
  expect_usage_error(good + "{\"step\": 2, \"loss\": \"low\"}\n", "bad.jsonl:2: \"loss\"");
  expect_usage_error(good + "{\"step\": 2, \"loss\": 1, \"mem\": {\"params\": \"big\"}}\n",
                     "bad.jsonl:2: \"mem.params\"");
  expect_usage_error(good + "{\"event\": \"eval\", \"val_loss\": 1}\n",
                     "bad.jsonl:2: missing \"step\"");
}

// A run killed while writing a line leaves it without '\n': the steps before it are read,
// the cut line is left out and flagged. A malformed line that does end in '\n' is an error.
TEST(TrainingLog, LastLineCutByAKillIsLeftOut) {
  const std::string good = "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.5}\n";
  const RunLog cut = parse_training_log(good + "{\"step\": 3, \"lo", "cut.jsonl");
  ASSERT_EQ(cut.steps.size(), 2u);
  EXPECT_TRUE(cut.cut_last_line);
  const RunLog whole = parse_training_log(good + "{\"step\": 3, \"loss\": 1.0}", "whole.jsonl");
  EXPECT_EQ(whole.steps.size(), 3u);  // no '\n' but whole: kept
  EXPECT_FALSE(whole.cut_last_line);
  expect_usage_error(good + "{\"step\": 3, \"lo\n", "bad.jsonl:3: malformed JSON");
  expect_usage_error("{\"step\": 1, \"lo", "no step lines");  // nothing whole at all
}

TEST(TrainingLog, EmptyOrMissingLogIsError) {
  expect_usage_error("", "no step lines");
  expect_usage_error("\n\n", "no step lines");
  expect_usage_error("{\"event\": \"eval\", \"step\": 1, \"accuracy\": 0.5}\n", "no step lines");
  EXPECT_THROW(read_training_log("/nonexistent/zoff/run.jsonl"), UsageError);
  EXPECT_THROW(read_training_log("/tmp"), UsageError);
}

}  // namespace
}  // namespace zoff::report::training_log_test
