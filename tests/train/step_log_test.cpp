// Tests of the JSONL step log and the example tasks behind `zoff train`.
#include "zoff/train/step_log.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "zoff/core/error.h"
#include "zoff/train/task.h"

namespace zoff::train::step_log_test {
namespace {

TEST(StepLog, WritesOneObjectPerStepWithTheDocumentedKeys) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("zoff_step_log_test_" + std::to_string(::getpid()) + ".jsonl");
  {
    StepLog log(path.string());
    StepRecord r;
    r.step = 3;
    r.loss = 1.5;
    r.lr = 1e-3;
    r.grad_norm = 0.25;
    r.samples_per_s = 100;
    r.tokens_per_s = 12800;
    r.mem.compute.params = 10;
    r.mem.offload.master = 40;
    r.mem.offload.optim = 80;
    r.mem.offload.grads = 40;
    log.write_step(r);
    log.write_eval(3, {{"val_loss", 1.25}});
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  auto j = nlohmann::json::parse(line);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "samples_per_s", "tokens_per_s"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["mem"]["params"], 10);
  EXPECT_EQ(j["mem"]["grads"], 40);
  EXPECT_EQ(j["mem"]["optim"], 120);  // master + optimizer states
  EXPECT_EQ(j["mem"]["offload"]["master"], 40);
  ASSERT_TRUE(std::getline(in, line));
  j = nlohmann::json::parse(line);
  EXPECT_EQ(j["event"], "eval");
  EXPECT_DOUBLE_EQ(j["val_loss"].get<double>(), 1.25);
  std::filesystem::remove(path);
}

TEST(StepLog, UnwritablePathIsAUsageError) {
  EXPECT_THROW(StepLog("/nonexistent-dir/zoff/log.jsonl"), UsageError);
}

TEST(Task, UnknownModelOrPresetNamesTheValidOnes) {
  try {
    make_task({"resnet", "", 0});
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp, gpt, cnn"), std::string::npos);
  }
  EXPECT_THROW(make_task({"mlp", "huge", 0}), UsageError);
  EXPECT_THROW(make_task({"gpt", "huge", 0}), UsageError);
}

TEST(Task, SameSeedSameWeightsAndAFiniteLoss) {
  auto a = make_task({"mlp", "tiny", 4});
  auto b = make_task({"mlp", "tiny", 4});
  auto pa = a->module()->parameters();
  auto pb = b->module()->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
  auto batch = a->train_set().get({0, 1, 2, 3});
  EXPECT_TRUE(std::isfinite(a->loss(batch).item<double>()));
}

TEST(Task, GptOnFortunesHasTokensAndSamples) {
  auto t = make_task({"gpt", "tiny", 1});
  EXPECT_EQ(t->tokens_per_sample(), 128);
  auto batch = t->train_set().get({0, 1});
  EXPECT_EQ(batch.inputs.sizes(), (std::vector<int64_t>{2, 128}));
  EXPECT_TRUE(t->evaluate().count("val_loss"));
  EXPECT_EQ(t->sample("The ", 16, 1).size(), 16u);
}

TEST(Task, GptEvaluatesInMicroBatchesAsInOneBatch) {
  // 32 windows in batches of 1, 5 and 32: the same mean up to summation order.
  constexpr double kRelTol = 1e-6;
  std::vector<double> losses;
  for (int64_t b : {1, 5, 32}) {
    TaskOptions o{"gpt", "tiny", 1};
    o.eval_batch = b;
    losses.push_back(make_task(o)->evaluate().at("val_loss"));
  }
  EXPECT_NEAR(losses[0], losses[2], kRelTol * losses[2]);
  EXPECT_NEAR(losses[1], losses[2], kRelTol * losses[2]);
  TaskOptions bad{"gpt", "tiny", 1};
  bad.eval_batch = 0;
  EXPECT_THROW(make_task(bad), UsageError);
}

}  // namespace
}  // namespace zoff::train::step_log_test
