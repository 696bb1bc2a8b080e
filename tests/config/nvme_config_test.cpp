// Config keys of the NVMe tier: offload_optimizer/offload_param nvme, sub_group_size, aio.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/core/error.h"

namespace zoff::config::nvme_config_test {
namespace {

TEST(NvmeConfig, Defaults) {
  const Config c = parse_config(R"({"train_batch_size": 4})", 1);
  EXPECT_EQ(c.zero.sub_group_size, 10000000);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 0);
  EXPECT_EQ(c.zero.offload_optimizer.gradients, "auto");
  EXPECT_EQ(c.aio.block_size, 1048576);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.thread_count, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
  EXPECT_EQ(c.aio.backend, "auto");
}

TEST(NvmeConfig, EachKeyIsParsedWithoutWarnings) {
  const Config c = parse_config(R"({"train_batch_size": 4,
      "zero_optimization": {"stage": 3, "sub_group_size": 1e6,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme", "buffer_count": 6,
                              "gradients": "nvme", "split_master": false},
        "offload_param": {"device": "nvme", "nvme_path": "/nvme2"}},
      "aio": {"block_size": 262144, "queue_depth": 32, "thread_count": 2,
              "single_submit": true, "overlap_events": false, "backend": "threads"}})",
                                1);
  EXPECT_EQ(c.zero.sub_group_size, 1000000);
  EXPECT_EQ(c.zero.offload_optimizer.device, "nvme");
  EXPECT_EQ(c.zero.offload_optimizer.nvme_paths, std::vector<std::string>{"/nvme"});
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 6);
  EXPECT_EQ(c.zero.offload_optimizer.gradients, "nvme");
  EXPECT_EQ(c.zero.offload_optimizer.split_master, std::optional<bool>(false));
  EXPECT_EQ(c.zero.offload_param.device, "nvme");
  EXPECT_EQ(c.zero.offload_param.nvme_paths, std::vector<std::string>{"/nvme2"});
  EXPECT_EQ(c.aio.block_size, 262144);
  EXPECT_EQ(c.aio.queue_depth, 32);
  EXPECT_EQ(c.aio.thread_count, 2);
  EXPECT_TRUE(c.aio.single_submit);
  EXPECT_FALSE(c.aio.overlap_events);
  EXPECT_EQ(c.aio.backend, "threads");
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
}

TEST(NvmeConfig, DeepSpeedKeysZoffDoesNotUseAreWarnedSayingWhatItDoes) {
  const Config c = parse_config(R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "ratio": 0.3, "fast_init": true}}})",
                                1);
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_NE(c.warnings[0].find("offload_optimizer.ratio is not used by zoff: "), std::string::npos);
  EXPECT_NE(c.warnings[1].find("offload_optimizer.fast_init is not used by zoff: "),
            std::string::npos);
}

struct BadCase {
  const char* name;
  const char* json;
  const char* message;
};

const BadCase kBadCases[] = {
    {"block_size_unaligned", R"({"train_batch_size": 4, "aio": {"block_size": 1000}})",
     "aio.block_size = 1000: must be a multiple of 4096"},
    {"queue_depth_zero", R"({"train_batch_size": 4, "aio": {"queue_depth": 0}})",
     "aio.queue_depth = 0: must be in [1, 4096]"},
    {"thread_count_huge", R"({"train_batch_size": 4, "aio": {"thread_count": 100000}})",
     "aio.thread_count = 100000: must be in [1, 256]"},
    {"backend_unknown", R"({"train_batch_size": 4, "aio": {"backend": "spdk"}})",
     "aio.backend = \"spdk\": must be \"auto\", \"io_uring\" or \"threads\""},
    {"aio_not_object", R"({"train_batch_size": 4, "aio": 3})", "aio = 3: must be a JSON object"},
    {"sub_group_tiny", R"({"train_batch_size": 4, "zero_optimization": {"sub_group_size": 10}})",
     "zero_optimization.sub_group_size = 10: must be >= 1024"},
    {"buffer_count_negative", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "buffer_count": -1}}})",
     "zero_optimization.offload_optimizer.buffer_count = -1: must be in [0, 1024]"},
    {"gradients_unknown", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "gradients": "disk"}}})",
     "zero_optimization.offload_optimizer.gradients = \"disk\": must be \"auto\", \"cpu\", "
     "\"nvme\" or \"stream\""},
    {"gradients_stream_cpu_offload", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "cpu", "gradients": "stream"}}})",
     "zero_optimization.offload_optimizer.gradients = \"stream\": needs "
     "zero_optimization.offload_optimizer.device = \"nvme\""},
    {"split_master_not_a_boolean", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "split_master": "yes"}}})",
     "zero_optimization.offload_optimizer.split_master = \"yes\": must be true or false"},
    {"stream_buffers_negative", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "nvme", "nvme_path": "/n", "stream_buffers": -2}}})",
     "zero_optimization.offload_optimizer.stream_buffers = -2: must be in [0, 4096]"},
    {"gradients_nvme_cpu_offload", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_optimizer": {"device": "cpu", "gradients": "nvme"}}})",
     "zero_optimization.offload_optimizer.gradients = \"nvme\": needs "
     "zero_optimization.offload_optimizer.device = \"nvme\""},
    {"nvme_stage0", R"({"train_batch_size": 4, "zero_optimization": {
        "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}})",
     "zero_optimization.offload_optimizer.device = \"nvme\": needs zero_optimization.stage >= 1"},
    {"param_nvme_stage2", R"({"train_batch_size": 4, "zero_optimization": {"stage": 2,
        "offload_param": {"device": "nvme", "nvme_path": "/n"}}})",
     "zero_optimization.offload_param.device = \"nvme\": needs zero_optimization.stage = 3"},
};

class NvmeConfigBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(NvmeConfigBad, IsOneLineNamingKeyAndValue) {
  const BadCase& b = GetParam();
  try {
    parse_config(b.json, 1);
    FAIL() << "accepted: " << b.json;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(b.message), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(NvmeConfig, NvmeConfigBad, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace zoff::config::nvme_config_test
