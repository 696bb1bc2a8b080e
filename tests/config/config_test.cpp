// Tests parsing, batch resolution, validation errors and warnings of the JSON config.
#include "zoff/config/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "zoff/core/error.h"

namespace zoff::config::config_test {
namespace {

const char* kFullConfig = R"({
  "train_batch_size": 64,
  "train_micro_batch_size_per_gpu": 4,
  "gradient_accumulation_steps": 4,
  "gradient_clipping": 1.0,
  "steps_per_print": 5,
  "wall_clock_breakdown": true,
  "optimizer": {"type": "AdamW",
                "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4, "warmup_num_steps": 100,
                           "warmup_type": "linear", "total_num_steps": 1000}},
  "zero_optimization": {"stage": 2, "reduce_bucket_size": 5e8, "allgather_bucket_size": 200000000,
                        "overlap_comm": false, "contiguous_gradients": true,
                        "host_shared_params": false,
                        "offload_optimizer": {"device": "nvme", "pin_memory": true,
                                              "nvme_path": "/tmp/nvme"}},
  "bf16": {"enabled": true}
})";

TEST(Config, FullConfigParses) {
  const Config c = parse_config(kFullConfig, 4);
  EXPECT_EQ(c.train_batch_size, 64);
  EXPECT_EQ(c.train_micro_batch_size_per_gpu, 4);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.steps_per_print, 5);
  EXPECT_TRUE(c.wall_clock_breakdown);
  EXPECT_EQ(c.optimizer.type, "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.scheduler.type, "WarmupDecayLR");
  EXPECT_EQ(c.scheduler.warmup_num_steps, 100);
  EXPECT_EQ(c.scheduler.warmup_type, "linear");
  EXPECT_EQ(c.scheduler.total_num_steps, 1000);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000000);
  EXPECT_EQ(c.zero.allgather_bucket_size, 200000000);
  EXPECT_FALSE(c.zero.overlap_comm);
  EXPECT_FALSE(c.zero.host_shared_params);  // default true
  EXPECT_EQ(c.zero.offload_optimizer.device, "nvme");
  EXPECT_TRUE(c.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(c.zero.offload_optimizer.nvme_paths, std::vector<std::string>{"/tmp/nvme"});
  EXPECT_TRUE(c.bf16);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Config, DefaultsAndOptimizerTypes) {
  Config c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "sgd",
      "params": {"lr": 0.1, "momentum": 0.9, "nesterov": true}}})",
                          2);
  EXPECT_EQ(c.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_TRUE(c.zero.host_shared_params);
  EXPECT_EQ(c.scheduler.type, "");
  c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "ADAGRAD",
      "params": {"lr_decay": 0.01, "initial_accumulator_value": 0.1}}})",
                   1);
  EXPECT_EQ(c.optimizer.type, "adagrad");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-2);    // torch.optim.Adagrad default
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-10);  // torch.optim.Adagrad default
  EXPECT_DOUBLE_EQ(c.optimizer.lr_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.initial_accumulator_value, 0.1);
  c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
      "params": {"lr": 1e-3, "adam_w_mode": true}}})",
                   1);
  EXPECT_EQ(c.optimizer.type, "adamw");
}

TEST(Config, FpSixteenAndSchedulerDefaults) {
  const Config c = parse_config(R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "Adam", "params": {"lr": 0.005}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}},
      "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
               "loss_scale_window": 500, "hysteresis": 3, "min_loss_scale": 0.5}})",
                                3);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.initial_scale_power, 12);
  EXPECT_EQ(c.fp16.loss_scale_window, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_DOUBLE_EQ(c.fp16.min_loss_scale, 0.5);
  EXPECT_EQ(c.optimizer.type, "adam");
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 0.005);  // defaults to the optimizer lr
  EXPECT_EQ(c.scheduler.warmup_type, "log");
}

TEST(Config, BatchTripleResolvesLikeDeepSpeed) {
  auto batch = [](const std::string& json, int world) {
    const Config c = parse_config(json, world);
    return std::to_string(c.train_batch_size) + "=" +
           std::to_string(c.train_micro_batch_size_per_gpu) + "*" +
           std::to_string(c.gradient_accumulation_steps) + "*" + std::to_string(world);
  };
  EXPECT_EQ(batch(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2),
            "32=4*4*2");
  EXPECT_EQ(batch(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 2), "32=8*2*2");
  EXPECT_EQ(batch(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", 2),
            "30=3*5*2");
  EXPECT_EQ(batch(R"({"train_batch_size": 12})", 3), "12=4*1*3");
  EXPECT_EQ(batch(R"({"train_micro_batch_size_per_gpu": 6})", 4), "24=6*1*4");
  EXPECT_EQ(batch(R"({"train_batch_size": 24, "train_micro_batch_size_per_gpu": 6,
                      "gradient_accumulation_steps": 2})",
                  2),
            "24=6*2*2");
}

TEST(Config, UnknownKeysWarnNotFail) {
  const Config c = parse_config(R"({"train_batch_size": 4, "zero_optimisation": {"stage": 2},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "amsgrad": false}}})",
                                1);
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_EQ(c.warnings[0], "config: unknown key 'optimizer.params.amsgrad' (ignored)");
  EXPECT_EQ(c.warnings[1], "config: unknown key 'zero_optimisation' (ignored)");
  EXPECT_EQ(c.zero.stage, 0);
}

// DeepSpeed's legacy "cpu_offload": true is offload_optimizer.device = "cpu", with a warning.
TEST(Config, LegacyCpuOffloadMeansOffloadOptimizerCpu) {
  const Config c = parse_config(R"({"train_batch_size": 4,
      "zero_optimization": {"stage": 2, "cpu_offload": true},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                                1);
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_NE(c.warnings[0].find("zero_optimization.cpu_offload = true is deprecated"),
            std::string::npos)
      << c.warnings[0];
  EXPECT_THROW(parse_config(R"({"train_batch_size": 4,
      "zero_optimization": {"stage": 2, "cpu_offload": true,
                            "offload_optimizer": {"device": "cpu"}},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                            1),
               UsageError);
  const Config off = parse_config(R"({"train_batch_size": 4,
      "zero_optimization": {"stage": 2, "cpu_offload": false},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})",
                                  1);
  EXPECT_EQ(off.zero.offload_optimizer.device, "none");
}

// "auto" (Hugging Face Trainer placeholders) and numbers beyond double are clean UsageErrors.
TEST(Config, AutoPlaceholderAndNumberOverflowAreNamed) {
  try {
    parse_config(R"({"train_batch_size": "auto"})", 1);
    FAIL() << "\"auto\" accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Hugging Face Trainer placeholder"), std::string::npos)
        << e.what();
  }
  try {
    parse_config(R"({"train_batch_size": 4, "gradient_clipping": 1e999})", 1);
    FAIL() << "1e999 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("1e999"), std::string::npos) << e.what();
  }
}

struct BadConfig {
  const char* name;
  const char* json;
  const char* must_mention;  // the key path (or position) the message has to name
};

// Each of these must be a UsageError whose one-line message names the offending key.
const BadConfig kBadConfigs[] = {
    {"stage_out_of_range", R"({"train_batch_size": 4, "zero_optimization": {"stage": 7}})",
     "zero_optimization.stage = 7: must be 0, 1, 2 or 3"},
    {"stage_wrong_type", R"({"train_batch_size": 4, "zero_optimization": {"stage": "two"}})",
     "zero_optimization.stage = \"two\": must be an integer"},
    {"negative_lr",
     R"({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": -0.1}}})",
     "optimizer.params.lr = -0.1"},
    {"beta_one", R"({"train_batch_size": 4, "optimizer": {"type": "Adam",
        "params": {"betas": [0.9, 1.0]}}})",
     "optimizer.params.betas = [0.9,1.0]"},
    {"betas_not_pair", R"({"train_batch_size": 4, "optimizer": {"type": "Adam",
        "params": {"betas": 0.9}}})",
     "optimizer.params.betas = 0.9"},
    {"eps_zero", R"({"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"eps": 0}}})",
     "optimizer.params.eps = 0"},
    {"unknown_optimizer", R"({"train_batch_size": 4, "optimizer": {"type": "Lamb"}})",
     "optimizer.type = \"Lamb\""},
    {"sgd_without_lr", R"({"train_batch_size": 4, "optimizer": {"type": "SGD"}})",
     "optimizer.params.lr"},
    {"bucket_zero",
     R"({"train_batch_size": 4, "zero_optimization": {"stage": 2, "reduce_bucket_size": 0}})",
     "zero_optimization.reduce_bucket_size = 0"},
    {"allgather_bucket_negative",
     R"({"train_batch_size": 4, "zero_optimization": {"allgather_bucket_size": -5}})",
     "zero_optimization.allgather_bucket_size = -5"},
    {"clipping_negative", R"({"train_batch_size": 4, "gradient_clipping": -1})",
     "gradient_clipping = -1"},
    {"batch_not_divisible", R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3})",
     "train_batch_size = 10"},
    {"batch_triple_disagrees", R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2})",
     "train_batch_size = 10"},
    {"no_batch", R"({"gradient_accumulation_steps": 2})", "train_micro_batch_size_per_gpu"},
    {"micro_zero", R"({"train_micro_batch_size_per_gpu": 0})",
     "train_micro_batch_size_per_gpu = 0"},
    {"warmup_type", R"({"train_batch_size": 4, "scheduler": {"type": "WarmupLR",
        "params": {"warmup_type": "cosine"}}})",
     "scheduler.params.warmup_type = \"cosine\""},
    {"decay_without_total",
     R"({"train_batch_size": 4, "scheduler": {"type": "WarmupDecayLR", "params": {}}})",
     "scheduler.params.total_num_steps"},
    {"cosine_total_too_small", R"({"train_batch_size": 4, "scheduler": {"type": "WarmupCosineLR",
        "params": {"warmup_num_steps": 50, "total_num_steps": 50}}})",
     "scheduler.params.total_num_steps = 50"},
    {"unknown_scheduler", R"({"train_batch_size": 4, "scheduler": {"type": "OneCycle"}})",
     "scheduler.type = \"OneCycle\""},
    {"cos_ratio", R"({"train_batch_size": 4, "scheduler": {"type": "WarmupCosineLR",
        "params": {"total_num_steps": 100, "cos_min_ratio": 1.5}}})",
     "scheduler.params.cos_min_ratio = 1.5"},
    {"nvme_without_path", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "nvme"}}})",
     "zero_optimization.offload_optimizer.device = \"nvme\""},
    {"offload_device", R"({"train_batch_size": 4, "zero_optimization": {"stage": 1,
        "offload_optimizer": {"device": "gpu"}}})",
     "zero_optimization.offload_optimizer.device = \"gpu\""},
    {"offload_stage_zero", R"({"train_batch_size": 4, "zero_optimization": {
        "offload_optimizer": {"device": "cpu"}}})",
     "zero_optimization.offload_optimizer.device = \"cpu\": needs zero_optimization.stage"},
    {"bool_wrong_type", R"({"train_batch_size": 4, "zero_optimization": {"overlap_comm": 1}})",
     "zero_optimization.overlap_comm = 1: must be true or false"},
    {"host_shared_params",
     R"({"train_batch_size": 4, "zero_optimization": {"host_shared_params": "auto"}})",
     "zero_optimization.host_shared_params = \"auto\": must be true or false"},
    {"both_precisions",
     R"({"train_batch_size": 4, "bf16": {"enabled": true}, "fp16": {"enabled": true}})",
     "bf16.enabled = true and fp16.enabled = true"},
    {"fp16_window", R"({"train_batch_size": 4, "fp16": {"enabled": true, "loss_scale_window": 0}})",
     "fp16.loss_scale_window = 0"},
    {"section_wrong_type", R"({"train_batch_size": 4, "optimizer": "adam"})",
     "optimizer = \"adam\": must be a JSON object"},
    {"steps_per_print", R"({"train_batch_size": 4, "steps_per_print": 0})", "steps_per_print = 0"},
    {"wall_clock_breakdown", R"({"train_batch_size": 4, "wall_clock_breakdown": "yes"})",
     "wall_clock_breakdown = \"yes\": must be true or false"},
    {"malformed_json", "{\"train_batch_size\": 4,\n  \"stage\": }",
     "malformed JSON at line 2, column"},
    {"duplicate_key", R"({"train_batch_size": 4, "train_batch_size": 8})",
     "duplicate key 'train_batch_size'"},
    {"not_an_object", "[1, 2]", "top level"},
};

class BadConfigTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigTest, IsUsageErrorNamingTheKey) {
  const BadConfig& bad = GetParam();
  try {
    parse_config(bad.json, 1);
    FAIL() << bad.name << ": expected UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("config", 0), 0u) << what;
    EXPECT_NE(what.find(bad.must_mention), std::string::npos)
        << bad.name << ": message '" << what << "' lacks '" << bad.must_mention << "'";
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Config, BadConfigTest, ::testing::ValuesIn(kBadConfigs),
                         [](const ::testing::TestParamInfo<BadConfig>& info) {
                           return std::string(info.param.name);
                         });

TEST(Config, BadWorldSizeIsUsageError) {
  EXPECT_THROW(parse_config(R"({"train_batch_size": 4})", 0), UsageError);
}

TEST(Config, LoadConfigReadsFileAndNamesIt) {
  char dir_template[] = "/tmp/zoff_config_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string good = dir + "/good.json";
  std::ofstream(good) << kFullConfig;
  EXPECT_EQ(load_config(good, 4).zero.stage, 2);

  const std::string bad = dir + "/bad.json";
  std::ofstream(bad) << R"({"train_batch_size": 4, "zero_optimization": {"stage": 9}})";
  try {
    load_config(bad, 1);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("zero_optimization.stage = 9"), std::string::npos);
  }
  try {
    load_config(dir + "/missing.json", 1);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos) << e.what();
  }
  std::remove(good.c_str());
  std::remove(bad.c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace zoff::config::config_test
