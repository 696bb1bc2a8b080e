// The optimizer.state_dtype key: default, accepted values, refusals, and the normalized config.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "zoff/config/config.h"
#include "zoff/config/config_json.h"
#include "zoff/core/error.h"

namespace zoff::config::state_dtype_config_test {
namespace {

std::string with_optimizer(const std::string& optimizer) {
  return R"({"train_batch_size": 4, "optimizer": )" + optimizer + "}";
}

TEST(StateDtypeConfig, DefaultsToFp32) {
  EXPECT_EQ(parse_config(R"({"train_batch_size": 4})", 1).optimizer.state_dtype, "fp32");
  EXPECT_EQ(parse_config(with_optimizer(R"({"type": "AdamW"})"), 1).optimizer.state_dtype, "fp32");
}

TEST(StateDtypeConfig, AcceptsEachDtypeBesideTheTypeWithoutWarnings) {
  for (const std::string dtype : {"fp32", "bf16", "int8"}) {
    for (const std::string type : {"AdamW", "Adam"}) {
      const Config c =
          parse_config(with_optimizer(R"({"type": ")" + type + R"(", "state_dtype": ")" + dtype +
                                      R"(", "params": {"lr": 1e-3}})"),
                       1);
      EXPECT_EQ(c.optimizer.state_dtype, dtype);
      EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
    }
  }
}

// Refused in one line naming the value (and, for a non-Adam optimizer, its type).
void expect_refused(const std::string& text, const std::vector<std::string>& needles) {
  try {
    parse_config(text, 1);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& n : needles) EXPECT_NE(what.find(n), std::string::npos) << n << ": " << what;
  }
}

TEST(StateDtypeConfig, BadValuesAreRefusedNamingThem) {
  expect_refused(with_optimizer(R"({"type": "AdamW", "state_dtype": "fp8"})"),
                 {"optimizer.state_dtype", "\"fp8\"", "fp32, bf16 or int8"});
  expect_refused(with_optimizer(R"({"type": "AdamW", "state_dtype": "INT8"})"), {"\"INT8\""});
  expect_refused(with_optimizer(R"({"type": "AdamW", "state_dtype": 8})"),
                 {"optimizer.state_dtype"});
  expect_refused(with_optimizer(R"({"type": "SGD", "state_dtype": "int8", "params": {"lr": 0.1}})"),
                 {"optimizer.state_dtype", "\"int8\"", "sgd"});
  expect_refused(with_optimizer(R"({"type": "Adagrad", "state_dtype": "bf16"})"),
                 {"\"bf16\"", "adagrad"});
}

// The normalized config (meta.json's "config") carries the key and parses back to it.
TEST(StateDtypeConfig, NormalizedConfigCarriesIt) {
  const Config c = parse_config(with_optimizer(R"({"type": "AdamW", "state_dtype": "int8"})"), 1);
  const std::string text = normalized_config_json(c);
  EXPECT_EQ(nlohmann::json::parse(text).at("optimizer").at("state_dtype"), "int8");
  EXPECT_EQ(parse_config(text, 1).optimizer.state_dtype, "int8");
}

}  // namespace
}  // namespace zoff::config::state_dtype_config_test
