// Stage 3's logged model-state bytes per rank against `zoff estimate` (gpt small, bf16,
// N = 1, 2, 3): (2 + 4 + 12) psi / N (bf16 shard, fp32 gradient shard, fp32 master + m + v)
// plus the units whole at once, bounded by stage3_max_live_parameters plus one unit.
#include <gtest/gtest.h>

#include <cstdio>

#include "cli_test_support.h"
#include "zoff/estimate/memory_estimate.h"
#include "zoff/models/gpt_config.h"

namespace zoff::cli_test::stage3_memory_test {
namespace {

// Per-unit padding and the units that stay whole (wte, wpe and ln_f are below the default
// persistence threshold) are what the estimate leaves out: well under this.
constexpr double kEstimateRelTol = 0.05;
constexpr int64_t kSteps = 3;  // the first step records the unit order; the peak is after it

class Stage3Memory : public testing::TestWithParam<int> {};

TEST_P(Stage3Memory, LoggedBytesMatchTheEstimate) {
  const int world = GetParam();
  TempDir dir;
  TrainJob job;
  job.model = "gpt";
  job.preset = "small";
  job.config_path = dir.file("config.json");
  job.log_path = dir.file("run.jsonl");
  job.steps = kSteps;
  job.seed = 1;
  job.world = world;
  auto config = example_config("gpt_small_bf16_stage3.json");
  config["train_batch_size"] = 6;
  config["train_micro_batch_size_per_gpu"] = 1;
  config.erase("gradient_accumulation_steps");
  write_text(job.config_path, config.dump(2));
  const auto run = run_train(job);
  ASSERT_EQ(run.exit_code, 0) << describe(run);
  const auto steps = read_step_log(job.log_path);
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps));
  const auto& mem = steps.back().at("mem");
  const auto& c = mem.at("compute");
  const double live = mem.at("live_units").get<double>();
  const double peak = mem.at("peak_live_units").get<double>();
  // Model states now (shards, and the persistent units in params) plus the peak of the
  // units whole at once.
  const double states = c.at("params").get<double>() + c.at("grads").get<double>() +
                        c.at("master").get<double>() + c.at("optim").get<double>();
  const double got = states - live + peak;

  const auto gpt = models::gpt_preset("small");
  const int64_t block = 12 * gpt.n_embd * gpt.n_embd + 13 * gpt.n_embd;
  const int64_t max_live = config["zero_optimization"]["stage3_max_live_parameters"].get<int64_t>();
  estimate::EstimateOptions o;
  o.params = models::gpt_param_count(gpt);
  o.ranks = world;
  o.precision = estimate::Precision::kBf16;
  o.live_params = 2 * block;  // one block in use, one prefetched (prefetch = one block)
  const double want = static_cast<double>(estimate::estimate_memory(o).stages[3].compute_bytes);
  EXPECT_NEAR(got, want, kEstimateRelTol * want);
  EXPECT_LE(peak, 2.0 * static_cast<double>(max_live + block)) << "bf16: 2 bytes per element";
  EXPECT_GT(peak, 0.0);
  std::printf(
      "[stage3 mem] gpt small bf16 N %d: logged %.0f B (states %.0f, live now %.0f, peak "
      "live %.0f), estimate %.0f B, ratio %.4f\n",
      world, got, states, live, peak, want, got / want);
  std::fflush(stdout);
}

INSTANTIATE_TEST_SUITE_P(GptSmall, Stage3Memory, testing::Values(1, 2, 3));

}  // namespace
}  // namespace zoff::cli_test::stage3_memory_test
