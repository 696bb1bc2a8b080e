// Inline SVG charts (lines and stacked bars) with axes, ticks and legends, drawn as text.
#pragma once

#include <string>
#include <vector>

namespace zoff::report {

// How tick labels and tooltips show values.
enum class ValueFormat { kPlain, kBytes };  // kBytes: B, kB, MB, GB (powers of 1000)

struct LineSeries {
  std::string name;
  std::string color;         // CSS color
  std::vector<double> x, y;  // same length; NaN y values are gaps
  bool dashed = false;
  bool markers = false;  // draw a dot per point (sparse series such as evals)
};

struct LineChart {
  std::string id;  // the <svg id=...>
  std::string title, x_label, y_label;
  ValueFormat y_format = ValueFormat::kPlain;
  bool y_from_zero = false;  // include 0 in the y range (throughput, bytes)
  std::vector<LineSeries> series;
};

struct BarStack {
  std::string label;           // under the bar
  std::vector<double> values;  // one per category, same order as StackedBarChart::categories
};

struct StackedBarChart {
  std::string id, title, y_label;
  ValueFormat y_format = ValueFormat::kBytes;
  std::vector<std::string> categories;
  std::vector<std::string> colors;  // one per category
  std::vector<BarStack> bars;
};

// Renders a complete <svg ...>...</svg> element, `width` x `height` CSS pixels. Series with
// more than ~1500 points are reduced to per-bucket min and max, so spikes stay visible.
std::string render_line_chart(const LineChart& chart, int width, int height);
std::string render_stacked_bar_chart(const StackedBarChart& chart, int width, int height);

// "1.5 GB", "0.0003", "12.5k": the labels the charts use, also for tables.
std::string format_value(double v, ValueFormat format);
// Escapes &, <, >, " and ' for XML/HTML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace zoff::report
