// Config keys of ZeRO stage 3 (zero_optimization.stage3_*, offload_param) and of the
// activation_checkpointing section: defaults, values, errors, and the DeepSpeed keys zoff
// accepts with a warning.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/core/error.h"

namespace zoff::config::stage3_config_test {
namespace {

// A config whose zero_optimization section is `zero` (a JSON object's body).
std::string with_zero(const std::string& zero) {
  return R"({"train_batch_size": 4, "zero_optimization": {)" + zero + "}}";
}

int count_containing(const std::vector<std::string>& lines, const std::string& part) {
  int n = 0;
  for (const std::string& line : lines) n += line.find(part) != std::string::npos;
  return n;
}

TEST(Stage3Config, Defaults) {
  const Config c = parse_config(R"({"train_batch_size": 4})", 1);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 50000000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1000000000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(c.zero.offload_param.device, "none");
  EXPECT_FALSE(c.zero.offload_param.pin_memory);
  EXPECT_FALSE(c.activation_checkpointing);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Stage3Config, EachKeyIsParsedAndHonouredKeysDoNotWarn) {
  const Config c = parse_config(with_zero(R"("stage": 3, "stage3_prefetch_bucket_size": 5e6,
      "stage3_max_live_parameters": 1000, "stage3_param_persistence_threshold": 0,
      "offload_param": {"device": "cpu", "pin_memory": true})"),
                                1);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.stage3_prefetch_bucket_size, 5000000);
  EXPECT_EQ(c.zero.stage3_max_live_parameters, 1000);
  EXPECT_EQ(c.zero.stage3_param_persistence_threshold, 0);
  EXPECT_EQ(c.zero.offload_param.device, "cpu");
  EXPECT_TRUE(c.zero.offload_param.pin_memory);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Stage3Config, OffloadParamDeviceNoneIsAllowedBelowStage3) {
  // "none" offloads nothing, so it needs no stage; "cpu" below stage 3 is an error (see below).
  const Config c = parse_config(with_zero(R"("stage": 2, "offload_param": {"device": "none"})"), 1);
  EXPECT_EQ(c.zero.offload_param.device, "none");
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Stage3Config, ActivationCheckpointingIsOnWhenTheSectionIsPresent) {
  EXPECT_FALSE(parse_config(R"({"train_batch_size": 4})", 1).activation_checkpointing);
  const Config c = parse_config(R"({"train_batch_size": 4, "activation_checkpointing": {}})", 1);
  EXPECT_TRUE(c.activation_checkpointing);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(Stage3Config, UnknownKeyInActivationCheckpointingIsTheUsualWarning) {
  const Config c =
      parse_config(R"({"train_batch_size": 4, "activation_checkpointing": {"bogus": 1}})", 1);
  EXPECT_TRUE(c.activation_checkpointing);
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0], "config: unknown key 'activation_checkpointing.bogus' (ignored)");
}

struct WarnedKey {
  const char* section;  // the key's section path
  const char* key;
};

// Every DeepSpeed key zoff accepts but does not use.
const WarnedKey kWarnedKeys[] = {
    {"zero_optimization", "stage3_max_reuse_distance"},
    {"zero_optimization", "stage3_gather_16bit_weights_on_model_save"},
    {"zero_optimization", "stage3_gather_fp16_weights_on_model_save"},
    {"zero_optimization", "round_robin_gradients"},
    {"zero_optimization", "memory_efficient_linear"},
    {"zero_optimization", "zero_hpz_partition_size"},
    {"zero_optimization", "zero_quantized_weights"},
    {"zero_optimization", "zero_quantized_gradients"},
    {"zero_optimization", "mics_shard_size"},
    {"zero_optimization.offload_param", "buffer_count"},
    {"zero_optimization.offload_param", "buffer_size"},
    {"activation_checkpointing", "partition_activations"},
    {"activation_checkpointing", "cpu_checkpointing"},
    {"activation_checkpointing", "contiguous_memory_optimization"},
    {"activation_checkpointing", "number_checkpoints"},
    {"activation_checkpointing", "synchronize_checkpoint_boundary"},
    {"activation_checkpointing", "profile"},
};

// A stage-3 config holding `key` in its section, with `value` (any JSON).
std::string config_with(const WarnedKey& w, const std::string& value) {
  const std::string entry = "\"" + std::string(w.key) + "\": " + value;
  const std::string section = w.section;
  if (section == "zero_optimization") return with_zero(R"("stage": 3, )" + entry);
  if (section == "zero_optimization.offload_param") {
    return with_zero(R"("stage": 3, "offload_param": {"device": "cpu", )" + entry + "}");
  }
  return R"({"train_batch_size": 4, "activation_checkpointing": {)" + entry + "}}";
}

class WarnedKeyTest : public ::testing::TestWithParam<WarnedKey> {};

TEST_P(WarnedKeyTest, IsAcceptedWithExactlyOneWarningNamingIt) {
  const WarnedKey& w = GetParam();
  const std::string path = std::string(w.section) + "." + w.key;
  // Values are not checked beyond being JSON, so every JSON kind is accepted.
  for (const char* value : {"true", "1e9", "\"x\"", "[1, 2]", "{\"a\": null}"}) {
    const Config c = parse_config(config_with(w, value), 1);
    ASSERT_EQ(c.warnings.size(), 1u) << path << " = " << value;
    const std::string prefix = "config: " + path + " is not used by zoff: ";
    EXPECT_EQ(c.warnings[0].rfind(prefix, 0), 0u) << c.warnings[0];
    EXPECT_GT(c.warnings[0].size(), prefix.size()) << "says what zoff does instead";
    EXPECT_EQ(c.warnings[0].find('\n'), std::string::npos) << c.warnings[0];
  }
}

INSTANTIATE_TEST_SUITE_P(Stage3Config, WarnedKeyTest, ::testing::ValuesIn(kWarnedKeys),
                         [](const ::testing::TestParamInfo<WarnedKey>& info) {
                           std::string name =
                               std::string(info.param.section) + "_" + info.param.key;
                           for (char& ch : name) {
                             if (ch == '.') ch = '_';
                           }
                           return name;
                         });

TEST(Stage3Config, SeveralWarnedKeysWarnOnceEach) {
  const Config c = parse_config(R"({"train_batch_size": 4, "zero_optimization": {"stage": 3,
      "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true,
      "round_robin_gradients": true}, "activation_checkpointing": {"partition_activations": false,
      "cpu_checkpointing": true, "bogus": 1}})",
                                1);
  EXPECT_TRUE(c.activation_checkpointing);
  ASSERT_EQ(c.warnings.size(), 6u);
  for (const char* part :
       {"zero_optimization.stage3_max_reuse_distance is not used by zoff",
        "zero_optimization.stage3_gather_16bit_weights_on_model_save is not used by zoff",
        "zero_optimization.round_robin_gradients is not used by zoff",
        "activation_checkpointing.partition_activations is not used by zoff",
        "activation_checkpointing.cpu_checkpointing is not used by zoff",
        "unknown key 'activation_checkpointing.bogus'"}) {
    EXPECT_EQ(count_containing(c.warnings, part), 1) << part;
  }
}

struct BadStage3Config {
  const char* name;
  const char* json;
  const char* must_mention;  // key path, value and rule
};

const BadStage3Config kBadConfigs[] = {
    {"stage_four", R"({"train_batch_size": 4, "zero_optimization": {"stage": 4}})",
     "zero_optimization.stage = 4: must be 0, 1, 2 or 3"},
    {"stage_negative", R"({"train_batch_size": 4, "zero_optimization": {"stage": -1}})",
     "zero_optimization.stage = -1: must be 0, 1, 2 or 3"},
    {"prefetch_negative",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_prefetch_bucket_size": -1}})",
     "zero_optimization.stage3_prefetch_bucket_size = -1: must be >= 0"},
    {"prefetch_string",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_prefetch_bucket_size": "auto"}})",
     "zero_optimization.stage3_prefetch_bucket_size = \"auto\": must be an integer"},
    {"prefetch_fraction",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_prefetch_bucket_size": 1.5}})",
     "zero_optimization.stage3_prefetch_bucket_size = 1.5: must be an integer"},
    {"live_zero",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_max_live_parameters": 0}})",
     "zero_optimization.stage3_max_live_parameters = 0: must be > 0"},
    {"live_negative",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_max_live_parameters": -1}})",
     "zero_optimization.stage3_max_live_parameters = -1: must be > 0"},
    {"live_bool",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_max_live_parameters": true}})",
     "zero_optimization.stage3_max_live_parameters = true: must be an integer"},
    {"persistence_negative",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_param_persistence_threshold": -1}})",
     "zero_optimization.stage3_param_persistence_threshold = -1: must be >= 0"},
    {"persistence_array",
     R"({"train_batch_size": 4, "zero_optimization": {"stage3_param_persistence_threshold": [1]}})",
     "zero_optimization.stage3_param_persistence_threshold = [1]: must be an integer"},
    {"offload_param_not_object",
     R"({"train_batch_size": 4, "zero_optimization": {"stage": 3, "offload_param": "cpu"}})",
     "zero_optimization.offload_param = \"cpu\": must be a JSON object"},
    {"offload_param_nvme_without_path",
     R"({"train_batch_size": 4, "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})",
     "zero_optimization.offload_param.device = \"nvme\": needs "
     "zero_optimization.offload_param.nvme_path"},
    {"offload_param_gpu",
     R"({"train_batch_size": 4, "zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}})",
     "zero_optimization.offload_param.device = \"gpu\": must be \"none\", \"cpu\" or \"nvme\""},
    {"offload_param_device_number",
     R"({"train_batch_size": 4, "zero_optimization": {"stage": 3, "offload_param": {"device": 1}}})",
     "zero_optimization.offload_param.device = 1: must be a string"},
    {"offload_param_pin_memory_string", R"({"train_batch_size": 4, "zero_optimization": {"stage": 3,
        "offload_param": {"device": "cpu", "pin_memory": "yes"}}})",
     "zero_optimization.offload_param.pin_memory = \"yes\": must be true or false"},
    {"offload_param_stage2",
     R"({"train_batch_size": 4, "zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})",
     "zero_optimization.offload_param.device = \"cpu\": needs zero_optimization.stage = 3"},
    {"offload_param_no_stage",
     R"({"train_batch_size": 4, "zero_optimization": {"offload_param": {"device": "cpu"}}})",
     "zero_optimization.offload_param.device = \"cpu\": needs zero_optimization.stage = 3"},
    {"activation_checkpointing_bool",
     R"({"train_batch_size": 4, "activation_checkpointing": true})",
     "activation_checkpointing = true: must be a JSON object"},
    {"activation_checkpointing_array", R"({"train_batch_size": 4, "activation_checkpointing": []})",
     "activation_checkpointing = []: must be a JSON object"},
};

class BadStage3ConfigTest : public ::testing::TestWithParam<BadStage3Config> {};

TEST_P(BadStage3ConfigTest, IsOneLineUsageErrorNamingKeyAndValue) {
  const BadStage3Config& bad = GetParam();
  try {
    parse_config(bad.json, 1);
    FAIL() << bad.name << ": expected UsageError";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("config: ", 0), 0u) << what;
    EXPECT_NE(what.find(bad.must_mention), std::string::npos)
        << bad.name << ": message '" << what << "' lacks '" << bad.must_mention << "'";
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Stage3Config, BadStage3ConfigTest, ::testing::ValuesIn(kBadConfigs),
                         [](const ::testing::TestParamInfo<BadStage3Config>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace zoff::config::stage3_config_test
