// normalized_config_json: every key at its effective value, and parse_config reads it back.
#include "zoff/config/config_json.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "zoff/config/config.h"
#include "zoff_test_paths.h"

namespace zoff::config::config_json_test {
namespace {

using json = nlohmann::json;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Normalizing is a fixed point: the normalized text parses to a Config that normalizes to the
// same text, for every example config.
TEST(NormalizedConfig, EveryExampleConfigRoundTrips) {
  const auto dir = std::filesystem::path(ZOFF_SOURCE_DIR) / "examples" / "configs";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const Config c = parse_config(read_file(entry.path()), 2);
    const std::string normalized = normalized_config_json(c);
    const Config again = parse_config(normalized, 2);
    EXPECT_EQ(normalized_config_json(again), normalized) << entry.path();
    EXPECT_TRUE(again.warnings.empty()) << entry.path() << ": " << again.warnings.front();
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// Defaults filled in, the batch triple resolved, unknown keys and legacy spellings gone.
TEST(NormalizedConfig, HoldsEveryKeyAtItsEffectiveValue) {
  const std::string padding(1 << 20, 'x');
  const Config c = parse_config(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
      "notes": ")" + padding + R"(",
      "zero_optimization": {"stage": 2, "cpu_offload": true},
      "bfloat16": {"enabled": true},
      "optimizer": {"type": "Adam", "params": {"lr": 3e-4, "adam_w_mode": true}}})",
                                4);
  const std::string text = normalized_config_json(c);
  EXPECT_LT(text.size(), 4096u);  // the 1 MiB of unknown key is not carried along
  const json j = json::parse(text);
  EXPECT_FALSE(j.contains("notes"));
  EXPECT_EQ(j.at("gradient_accumulation_steps"), 2);  // 16 / (2 x 4 ranks)
  EXPECT_EQ(j.at("steps_per_print"), 10);
  EXPECT_EQ(j.at("wall_clock_breakdown"), false);
  EXPECT_EQ(j.at("optimizer").at("type"), "AdamW");
  EXPECT_DOUBLE_EQ(j.at("optimizer").at("params").at("lr").get<double>(), 3e-4);
  EXPECT_EQ(j.at("optimizer").at("params").at("betas"), json::array({0.9, 0.999}));
  const json& z = j.at("zero_optimization");
  EXPECT_FALSE(z.contains("cpu_offload"));
  EXPECT_EQ(z.at("offload_optimizer").at("device"), "cpu");
  EXPECT_EQ(z.at("reduce_bucket_size"), 500000000);
  EXPECT_EQ(z.at("sub_group_size"), 10000000);
  EXPECT_EQ(z.at("offload_param").at("max_in_cpu"), 1000000000);
  EXPECT_EQ(j.at("bf16").at("enabled"), true);
  EXPECT_FALSE(j.contains("bfloat16"));
  EXPECT_EQ(j.at("aio").at("block_size"), 1048576);
  EXPECT_EQ(j.at("fp16").at("initial_scale_power"), 16);
  EXPECT_FALSE(j.contains("scheduler"));  // constant lr
  EXPECT_FALSE(j.contains("activation_checkpointing"));
  // And it is a config that gives the same run, without the warnings of the original.
  EXPECT_FALSE(c.warnings.empty());
  const Config again = parse_config(text, 4);
  EXPECT_TRUE(again.warnings.empty()) << again.warnings.front();
  EXPECT_EQ(normalized_config_json(again), text);
}

}  // namespace
}  // namespace zoff::config::config_json_test
