// `zoff train --save`: meta.json holds the normalized config the run used, not the file as given
// (a 50 MB config once made an 85 MB meta.json).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_test_support.h"
#include "zoff/config/config.h"
#include "zoff/config/config_json.h"

namespace zoff::cli_test::checkpoint_meta_test {
namespace {

// An unknown key this large in the config (bytes); meta.json must stay far smaller.
constexpr size_t kPaddingBytes = size_t{8} << 20;
constexpr uintmax_t kMetaBoundBytes = 256 * 1024;

TEST(CheckpointMeta, HoldsTheNormalizedConfigTheRunUsed) {
  TempDir dir;
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 1;
  config["zero_optimization"]["cpu_offload"] = true;  // legacy spelling
  config["notes"] = std::string(kPaddingBytes, 'x');  // unknown: a warning, not stored
  const std::string config_path = dir.file("config.json");
  write_text(config_path, config.dump());
  TrainJob job;
  job.config_path = config_path;
  job.world = 2;
  job.steps = 2;
  job.extra = {"--save", dir.file("ckpt")};
  const ProcessResult r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  const std::string meta_path = dir.file("ckpt/step_2/meta.json");
  EXPECT_LT(std::filesystem::file_size(meta_path), kMetaBoundBytes);
  const auto meta = nlohmann::json::parse(read_text(meta_path));
  const auto& stored = meta.at("config");
  // Exactly what the engine ran with: the file parsed for this world size, normalized.
  const auto ran = config::load_config(config_path, job.world);
  EXPECT_EQ(stored, nlohmann::json::parse(config::normalized_config_json(ran)));
  EXPECT_FALSE(stored.contains("notes"));
  EXPECT_EQ(stored.at("gradient_accumulation_steps"), 3);  // 12 / (2 x 2 ranks)
  EXPECT_EQ(stored.at("zero_optimization").at("offload_optimizer").at("device"), "cpu");
  EXPECT_EQ(stored.at("zero_optimization").at("reduce_bucket_size"), 1500);
  EXPECT_EQ(stored.at("aio").at("queue_depth"), 8);  // a default
  std::printf("[meta] config %zu bytes -> meta.json %ju bytes\n", config.dump().size(),
              static_cast<uintmax_t>(std::filesystem::file_size(meta_path)));
}

}  // namespace
}  // namespace zoff::cli_test::checkpoint_meta_test
