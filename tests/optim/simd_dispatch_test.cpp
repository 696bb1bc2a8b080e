// Forcing the SIMD level through the API and through ZOFF_SIMD.
#include "zoff/optim/simd_dispatch.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "zoff/core/error.h"

namespace zoff::optim::simd_dispatch_test {
namespace {

// Restores ZOFF_SIMD (and the level it selects) when a test changed it.
class EnvRestore {
 public:
  EnvRestore() {
    const char* v = std::getenv("ZOFF_SIMD");
    had_ = v != nullptr;
    if (had_) value_ = v;
  }
  ~EnvRestore() {
    if (had_) {
      setenv("ZOFF_SIMD", value_.c_str(), 1);
    } else {
      unsetenv("ZOFF_SIMD");
    }
    apply_simd_level_from_env();
  }

 private:
  bool had_ = false;
  std::string value_;
};

std::string expected_target(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "AVX3";
    case SimdLevel::kAvx2:
      return "AVX2";
    default:
      return "SCALAR";
  }
}

TEST(SimdDispatch, ParsesLevelNames) {
  EXPECT_EQ(parse_simd_level("avx512"), SimdLevel::kAvx512);
  EXPECT_EQ(parse_simd_level("avx2"), SimdLevel::kAvx2);
  EXPECT_EQ(parse_simd_level("scalar"), SimdLevel::kScalar);
  EXPECT_EQ(parse_simd_level("best"), SimdLevel::kBest);
  for (auto level : {SimdLevel::kAvx512, SimdLevel::kAvx2, SimdLevel::kScalar}) {
    EXPECT_EQ(parse_simd_level(simd_level_name(level)), level);
  }
}

TEST(SimdDispatch, UnknownLevelIsUsageErrorNamingTheVariable) {
  try {
    parse_simd_level("sse9");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ZOFF_SIMD"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sse9"), std::string::npos) << e.what();
  }
}

TEST(SimdDispatch, ScalarIsAlwaysSupportedAndListIsBestFirst) {
  const auto levels = supported_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.back(), SimdLevel::kScalar);
  for (size_t i = 1; i < levels.size(); ++i) {
    EXPECT_LT(static_cast<int>(levels[i - 1]), static_cast<int>(levels[i]));
  }
}

TEST(SimdDispatch, ForcingSelectsThatTarget) {
  EnvRestore restore;
  for (SimdLevel level : supported_simd_levels()) {
    force_simd_level(level);
    EXPECT_EQ(active_simd_target(), expected_target(level));
  }
  force_simd_level(SimdLevel::kBest);
  EXPECT_EQ(active_simd_target(), expected_target(supported_simd_levels().front()));
}

TEST(SimdDispatch, EnvironmentVariableForcesLevel) {
  EnvRestore restore;
  for (SimdLevel level : supported_simd_levels()) {
    setenv("ZOFF_SIMD", simd_level_name(level).c_str(), 1);
    apply_simd_level_from_env();
    EXPECT_EQ(active_simd_target(), expected_target(level));
  }
  setenv("ZOFF_SIMD", "avx-9000", 1);
  EXPECT_THROW(apply_simd_level_from_env(), UsageError);
}

TEST(SimdDispatch, UnsupportedLevelIsUsageError) {
  EnvRestore restore;
  const auto levels = supported_simd_levels();
  for (auto level : {SimdLevel::kAvx512, SimdLevel::kAvx2}) {
    if (std::find(levels.begin(), levels.end(), level) != levels.end()) continue;
    EXPECT_THROW(force_simd_level(level), UsageError);
  }
  if (levels.size() == 3) GTEST_SKIP() << "this CPU runs every level; nothing to refuse";
}

}  // namespace
}  // namespace zoff::optim::simd_dispatch_test
