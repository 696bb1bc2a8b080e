// Tests the progress display's plain (non-terminal) lines, ETA and terminal redraw.
#include "zoff/report/progress.h"

#include <gtest/gtest.h>

#include <sstream>

#include "zoff/core/error.h"

namespace zoff::report::progress_test {
namespace {

ProgressStep step_at(int64_t step, int64_t total) {
  ProgressStep s;
  s.step = step;
  s.total_steps = total;
  s.loss = 2.0 / static_cast<double>(step);
  s.lr = 3e-4;
  s.samples_per_s = 512.0;
  s.mem_bytes = 1'230'000'000;
  return s;
}

TEST(Progress, PlainLinesEveryPrintEveryAndAtTheEnd) {
  std::ostringstream out;
  double t = 100.0;
  ProgressOptions o;
  o.print_every = 5;
  o.clock = [&t] { return t; };
  {
    ProgressDisplay p(out, /*is_tty=*/false, o);
    for (int64_t s = 1; s <= 12; ++s) {
      p.update(step_at(s, 12));
      t += 2.0;  // 2 s per step
    }
  }
  const std::string text = out.str();
  EXPECT_EQ(
      text,
      "step 5/12 | loss 0.4000 | lr 3.000e-04 | 512.0 samples/s | mem 1.23 GB | eta 0:00:14\n"
      "step 10/12 | loss 0.2000 | lr 3.000e-04 | 512.0 samples/s | mem 1.23 GB | eta 0:00:04\n"
      "step 12/12 | loss 0.1667 | lr 3.000e-04 | 512.0 samples/s | mem 1.23 GB | eta 0:00:00\n");
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(Progress, FormatsOptionalFields) {
  ProgressStep s;
  s.step = 7;
  s.loss = 1.5;
  s.tokens_per_s = 12345.4;
  EXPECT_EQ(ProgressDisplay::format_line(s, -1.0), "step 7 | loss 1.5000 | 12345 tokens/s");
  EXPECT_EQ(ProgressDisplay::format_duration(3723.4), "1:02:03");
  EXPECT_EQ(ProgressDisplay::format_bar(5, 10, 10), "[#####.....] ");
  EXPECT_EQ(ProgressDisplay::format_bar(15, 10, 4), "[####] ");
}

TEST(Progress, TerminalRedrawsOneLine) {
  std::ostringstream out;
  double t = 0.0;
  ProgressOptions o;
  o.width = 120;
  o.redraw_seconds = 0.5;
  o.clock = [&t] { return t; };
  ProgressDisplay p(out, /*is_tty=*/true, o);
  for (int64_t s = 1; s <= 10; ++s) {
    p.update(step_at(s, 10));
    t += 0.3;  // redraws every other step, plus the last
  }
  const std::string text = out.str();
  size_t redraws = 0;
  for (size_t pos = text.find("\r\033[K"); pos != std::string::npos;
       pos = text.find("\r\033[K", pos + 1)) {
    ++redraws;
  }
  EXPECT_EQ(redraws, 6u);
  EXPECT_EQ(text.back(), '\n');  // the last step closes the line
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_NE(text.find("[##############################] step 10/10"), std::string::npos) << text;
}

TEST(Progress, BadPrintEveryIsUsageError) {
  std::ostringstream out;
  ProgressOptions o;
  o.print_every = 0;
  EXPECT_THROW(ProgressDisplay(out, false, o), UsageError);
}

}  // namespace
}  // namespace zoff::report::progress_test
