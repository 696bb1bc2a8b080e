// WorldInfo::from_env on good and bad torchrun-style environments, and init_comm's choice of
// backend.
#include "zoff/dist/world.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "zoff/core/error.h"

namespace zoff::dist::world_test {
namespace {

const char* const kVariables[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                  "MASTER_ADDR", "MASTER_PORT"};

// Clears the launch variables for one test and puts the process's own values back after it.
class LaunchEnv {
 public:
  explicit LaunchEnv(const std::map<std::string, std::string>& values) {
    for (const char* name : kVariables) {
      const char* old = std::getenv(name);
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ~LaunchEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// from_env must throw UsageError whose message contains `needle` (the variable and its value).
void expect_usage_error(const std::map<std::string, std::string>& values,
                        const std::string& needle) {
  LaunchEnv env(values);
  try {
    WorldInfo::from_env();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(WorldInfo, NoVariablesIsRankZeroOfOne) {
  LaunchEnv env({});
  const auto world = WorldInfo::from_env();
  EXPECT_EQ(world.rank, 0);
  EXPECT_EQ(world.world_size, 1);
  EXPECT_EQ(world.local_rank, 0);
  EXPECT_EQ(world.local_world_size, 1);
}

TEST(WorldInfo, ReadsAFullTorchrunEnvironment) {
  LaunchEnv env({{"RANK", "5"},
                 {"WORLD_SIZE", "8"},
                 {"LOCAL_RANK", "1"},
                 {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "10.0.0.7"},
                 {"MASTER_PORT", "29600"}});
  const auto world = WorldInfo::from_env();
  EXPECT_EQ(world.rank, 5);
  EXPECT_EQ(world.world_size, 8);
  EXPECT_EQ(world.local_rank, 1);
  EXPECT_EQ(world.local_world_size, 4);
  EXPECT_EQ(world.master_addr, "10.0.0.7");
  EXPECT_EQ(world.master_port, 29600);
}

TEST(WorldInfo, LocalValuesDefaultToOneNode) {
  LaunchEnv env({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  const auto world = WorldInfo::from_env();
  EXPECT_EQ(world.local_rank, 2);
  EXPECT_EQ(world.local_world_size, 3);
}

TEST(WorldInfo, MalformedOrInconsistentValuesNameTheVariable) {
  expect_usage_error({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}, "RANK='abc'");
  expect_usage_error({{"RANK", "1"}, {"WORLD_SIZE", "2x"}}, "WORLD_SIZE='2x'");
  expect_usage_error({{"RANK", ""}, {"WORLD_SIZE", "2"}}, "RANK is set but empty");
  expect_usage_error({{"RANK", "99999999999"}, {"WORLD_SIZE", "2"}}, "RANK='99999999999'");
  expect_usage_error({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2");
  expect_usage_error({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK=-1");
  expect_usage_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE=0");
  expect_usage_error({{"RANK", "0"}}, "RANK is set but WORLD_SIZE is not");
  expect_usage_error({{"WORLD_SIZE", "4"}}, "WORLD_SIZE is set but RANK is not");
  expect_usage_error({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}},
                     "LOCAL_WORLD_SIZE=8");
  expect_usage_error(
      {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
      "LOCAL_RANK=2");
  expect_usage_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}},
                     "MASTER_PORT=70000");
  expect_usage_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}, "MASTER_PORT=0");
  expect_usage_error({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}},
                     "MASTER_ADDR is set but empty");
}

TEST(InitComm, WorldOfOneIsLocalAndANonPositiveTimeoutIsRefused) {
  WorldInfo world;
  EXPECT_EQ(init_comm(world, std::chrono::seconds(1))->backend(), "single");
  EXPECT_THROW(init_comm(world, std::chrono::milliseconds(0)), UsageError);
}

}  // namespace
}  // namespace zoff::dist::world_test
