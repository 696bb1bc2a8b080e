// `zoff bench memory`: one JSON object with a rate per pass, and bad flags refused by name.
#include <gtest/gtest.h>

#include <string>

#include "cli_test_support.h"

namespace zoff::cli_test::bench_memory_test {
namespace {

TEST(BenchMemory, PrintsOneJsonObjectWithEveryPass) {
  const auto r = run_zoff({"bench", "memory", "--bytes", "16777216", "--repeats", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  for (const std::string s : {"\"bytes\": 16777216", "\"threads\": 2", "\"read_gbs\": [",
                              "\"best_gbs\": ", "\"median_gbs\": "}) {
    EXPECT_NE(lines[0].find(s), std::string::npos) << lines[0];
  }
}

TEST(BenchMemory, BadFlagsAreOneLineNamingTheValue) {
  expect_one_line_refusal(run_zoff({"bench", "memory", "--bytes", "10"}), {"--bytes = 10"});
  expect_one_line_refusal(run_zoff({"bench", "memory", "--threads", "0"}), {"--threads = 0"});
  expect_one_line_refusal(run_zoff({"bench", "memory", "--repeats", "-1"}), {"--repeats = -1"});
}

}  // namespace
}  // namespace zoff::cli_test::bench_memory_test
