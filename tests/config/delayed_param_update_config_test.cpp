// Config keys of the delayed parameter update (zero_optimization.offload_optimizer).
#include <gtest/gtest.h>

#include "zoff/config/config.h"
#include "zoff/core/error.h"

namespace zoff::config::delayed_param_update_config_test {
namespace {

std::string with_offload(const std::string& offload) {
  return R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8,
             "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
             "zero_optimization": {"stage": 2, "offload_optimizer": )" +
         offload + "}}";
}

TEST(DelayedParamUpdateConfig, ParsesEnabledAndWarmup) {
  auto c = parse_config(
      with_offload(
          R"({"device": "cpu", "delayed_param_update": {"enabled": true, "warmup_steps": 7}})"),
      1);
  EXPECT_TRUE(c.zero.offload_optimizer.delayed_param_update);
  EXPECT_EQ(c.zero.offload_optimizer.dpu_warmup_steps, 7);
}

TEST(DelayedParamUpdateConfig, BadValuesNameTheKey) {
  for (const char* bad :
       {R"({"device": "none", "delayed_param_update": {"enabled": true}})",
        R"({"device": "cpu", "delayed_param_update": {"enabled": true, "warmup_steps": -1}})",
        R"({"device": "cpu", "delayed_param_update": {"enabled": "yes"}})"}) {
    try {
      parse_config(with_offload(bad), 1);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("delayed_param_update"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zoff::config::delayed_param_update_config_test
