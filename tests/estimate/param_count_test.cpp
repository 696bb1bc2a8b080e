// Tests parsing of parameter counts such as 7.5e9, 1.3B and 350M.
#include "zoff/estimate/param_count.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"

namespace zoff::estimate::param_count_test {
namespace {

TEST(ParamCount, ParsesSuffixesAndScientific) {
  EXPECT_EQ(parse_param_count("7.5e9"), 7'500'000'000);
  EXPECT_EQ(parse_param_count("1.3B"), 1'300'000'000);
  EXPECT_EQ(parse_param_count("1.3b"), 1'300'000'000);
  EXPECT_EQ(parse_param_count("350M"), 350'000'000);
  EXPECT_EQ(parse_param_count("125k"), 125'000);
  EXPECT_EQ(parse_param_count("2T"), 2'000'000'000'000);
  EXPECT_EQ(parse_param_count("124439808"), 124'439'808);
}

// A regression test: 1.5 once became 2 parameters without a word.
TEST(ParamCount, RejectsFractionalCounts) {
  EXPECT_THROW(parse_param_count("1.5"), UsageError);
  EXPECT_THROW(parse_param_count("0.0000000015B"), UsageError);
  EXPECT_EQ(parse_param_count("1.5k"), 1'500);
  EXPECT_EQ(parse_param_count("0.1B"), 100'000'000);
}

TEST(ParamCount, RejectsGarbage) {
  for (const char* bad :
       {"", "abc", "1.3X", "B", "-5", "0", "1e30", "nan", "inf", " 5", "5 ", "1.2.3M"}) {
    try {
      parse_param_count(bad);
      FAIL() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace zoff::estimate::param_count_test
