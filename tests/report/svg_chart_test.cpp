// Tests the SVG chart primitives: ticks, labels, gaps, escaping and decimation.
#include "zoff/report/svg_chart.h"

#include <gtest/gtest.h>

#include <cmath>

namespace zoff::report::svg_chart_test {
namespace {

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

TEST(SvgChart, NiceTicksCoverTheData) {
  LineChart c;
  c.id = "t";
  c.title = "t";
  LineSeries s;
  s.name = "a";
  s.color = "#000";
  s.x = {0, 50, 100};
  s.y = {0.013, 0.02, 0.027};
  c.series.push_back(s);
  const std::string svg = render_line_chart(c, 400, 300);
  // y ticks 0.010 .. 0.030 by 0.005 (3 decimals: 0.010, not 0.01); x ticks 0 .. 100 by 20.
  EXPECT_NE(svg.find(">0.010</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">0.015</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">0.030</text>"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">0.035</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
  EXPECT_NE(svg.find(">20</text>"), std::string::npos);
}

TEST(SvgChart, NanMakesAGapAndNamesAreEscaped) {
  LineChart c;
  c.id = "gap";
  c.title = "a <b> & \"c\"";
  LineSeries s;
  s.name = "run<1>";
  s.color = "#123456";
  s.x = {1, 2, 3, 4, 5};
  s.y = {1, 2, NAN, 4, 5};
  c.series.push_back(s);
  const std::string svg = render_line_chart(c, 400, 300);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("a &lt;b&gt; &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("run&lt;1&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("run<1>"), std::string::npos);
}

TEST(SvgChart, LongSeriesAreDecimatedKeepingSpikes) {
  LineChart c;
  c.id = "long";
  LineSeries s;
  s.name = "a";
  s.color = "#000";
  for (int i = 0; i < 100000; ++i) {
    s.x.push_back(i);
    s.y.push_back(i == 54321 ? 100.0 : 1.0);
  }
  c.series.push_back(s);
  const std::string svg = render_line_chart(c, 400, 300);
  EXPECT_LT(svg.size(), 60000u);
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);  // the spike sets the y range
  const size_t points = count(svg, ",");
  EXPECT_LT(points, 1600u);
  EXPECT_GT(points, 700u);
}

TEST(SvgChart, StackedBarsAndByteLabels) {
  StackedBarChart c;
  c.id = "mem";
  c.categories = {"params", "optim"};
  c.colors = {"#111", "#222"};
  c.bars = {{"run / compute", {2e9, 0}}, {"run / offload", {0, 12e9}}};
  const std::string svg = render_stacked_bar_chart(c, 500, 300);
  // Background, 2 legend swatches, plot frame, and 2 segments (zero values draw nothing).
  EXPECT_EQ(count(svg, "<rect x="), 6u);
  EXPECT_NE(svg.find("run / offload optim: 12 GB"), std::string::npos);
  EXPECT_NE(svg.find(">12 GB</text>"), std::string::npos);
  EXPECT_EQ(format_value(1.5e9, ValueFormat::kBytes), "1.5 GB");
  EXPECT_EQ(format_value(2048, ValueFormat::kBytes), "2.05 kB");
  EXPECT_EQ(format_value(3e-4, ValueFormat::kPlain), "3.000e-04");
  EXPECT_EQ(format_value(NAN, ValueFormat::kPlain), "-");
}

}  // namespace
}  // namespace zoff::report::svg_chart_test
