// StepTicker: the running step's progress line at a fixed interval, only inside a step.
#include "zoff/train/step_ticker.h"

#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>

namespace zoff::train::step_ticker_test {
namespace {

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(StepProgressLine, NamesUnitsSubGroupsAndTheWaits) {
  engine::StepProgress p;
  p.forward_units = 20;
  p.backward_units = 3;
  p.groups_done = 7;
  p.io_params_ms = 1200;
  p.io_grad_window_ms = 0;
  p.io_optimizer_ms = 900;
  EXPECT_EQ(step_progress_line({4, 10, 38, 1133}, 30.2, p),
            "step 4/10, 30 s in: forward 20/38 units, backward 3/38 units, disk step 7/1133 "
            "sub-groups, I/O wait 2.1 s (parameters 1.2, gradient window 0.0, disk step 0.9)");
  // Without units or sub-groups those parts are left out.
  EXPECT_EQ(step_progress_line({1, 2, 0, 0}, 5, engine::StepProgress{}),
            "step 1/2, 5 s in: I/O wait 0.0 s (parameters 0.0, gradient window 0.0, disk step "
            "0.0)");
}

TEST(StepTicker, WritesAtItsIntervalOnlyWhileAStepRuns) {
  std::ostringstream out;
  int calls = 0;
  {
    StepTicker ticker(
        std::chrono::milliseconds(20),
        [&](double seconds) {
          ++calls;
          return "tick " + std::to_string(seconds > 0.0);
        },
        out);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no step: nothing
    EXPECT_EQ(out.str(), "");
    ticker.begin_step();
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    ticker.end_step();
    const std::string during = out.str();
    EXPECT_GE(count_lines(during), 2u) << during;  // ~7 due; a loaded machine writes fewer
    EXPECT_EQ(during.substr(0, 7), "tick 1\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // after the step: nothing
    EXPECT_EQ(out.str(), during);
  }
  EXPECT_EQ(static_cast<size_t>(calls), count_lines(out.str()));
}

TEST(StepTicker, ZeroIntervalStartsNothing) {
  std::ostringstream out;
  StepTicker ticker(
      std::chrono::milliseconds(0), [](double) { return std::string("x"); }, out);
  ticker.begin_step();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ticker.end_step();
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace zoff::train::step_ticker_test
