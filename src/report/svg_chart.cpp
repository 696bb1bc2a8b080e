// Line and stacked-bar charts as inline SVG text, with "nice" tick values.
#include "zoff/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace zoff::report {
namespace {

constexpr int kMarginLeft = 72, kMarginRight = 20, kMarginBottom = 46, kTitleHeight = 26;
constexpr int kLegendRowHeight = 18;
constexpr size_t kMaxDrawnPoints = 1500;  // per series, before min/max bucketing

// 1, 2, 5 or 10 times a power of ten, near `x`.
double nice_number(double x, bool round) {
  const double e = std::floor(std::log10(x));
  const double f = x / std::pow(10.0, e);
  double n;
  if (round) {
    n = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
  } else {
    n = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  }
  return n * std::pow(10.0, e);
}

struct Axis {
  double lo, hi, step;
};

Axis nice_axis(double lo, double hi, int target_ticks) {
  if (!(hi > lo)) {
    const double pad = lo == 0.0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double step = nice_number(nice_number(hi - lo, false) / (target_ticks - 1), true);
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Tick label with just enough decimals to tell neighbours `step` apart.
std::string tick_label(double v, double step, ValueFormat format) {
  if (std::fabs(v) < step * 1e-9) return "0";
  if (format == ValueFormat::kBytes) return format_value(v, format);
  const double mag = std::max(std::fabs(v), step);
  if (mag >= 1e4) {
    const char* unit = mag >= 1e9 ? "G" : mag >= 1e6 ? "M" : "k";
    const double div = mag >= 1e9 ? 1e9 : mag >= 1e6 ? 1e6 : 1e3;
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / div) + 1e-9)));
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.*f%s", std::min(decimals, 6), v / div, unit);
    return buf;
  }
  if (step < 1e-3) {
    char buf[64];
    const int digits = std::max(0, static_cast<int>(std::floor(std::log10(mag) + 1e-9) -
                                                    std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof(buf), "%.*e", std::min(digits, 6), v);
    return buf;
  }
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", std::min(decimals, 9), v);
  return buf;
}

// Legend entries laid out left to right, wrapping; returns the rows used.
int legend(std::ostringstream& os, const std::vector<std::pair<std::string, std::string>>& items,
           int x0, int y0, int width, bool boxes) {
  if (items.empty()) return 0;
  int x = x0, row = 0;
  for (const auto& [name, color] : items) {
    const int w = 26 + static_cast<int>(name.size()) * 7;
    if (x + w > width && x != x0) {
      x = x0;
      ++row;
    }
    const int y = y0 + row * kLegendRowHeight;
    if (boxes) {
      os << "<rect x=\"" << x << "\" y=\"" << y - 9 << "\" width=\"12\" height=\"10\" fill=\""
         << color << "\"/>";
    } else {
      os << "<line x1=\"" << x << "\" y1=\"" << y - 4 << "\" x2=\"" << x + 16 << "\" y2=\"" << y - 4
         << "\" stroke=\"" << color << "\" stroke-width=\"3\"/>";
    }
    os << "<text x=\"" << x + 20 << "\" y=\"" << y << "\" class=\"legend\">" << xml_escape(name)
       << "</text>";
    x += w;
  }
  return row + 1;
}

// Keeps the first point and each bucket's min and max (in x order) when a series is long.
void decimate(const std::vector<double>& x, const std::vector<double>& y, std::vector<double>& ox,
              std::vector<double>& oy) {
  const size_t n = std::min(x.size(), y.size());
  if (n <= kMaxDrawnPoints) {
    ox.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    oy.assign(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n));
    return;
  }
  const size_t buckets = kMaxDrawnPoints / 2;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * n / buckets, hi = (b + 1) * n / buckets;
    size_t imin = lo, imax = lo;
    for (size_t i = lo; i < hi; ++i) {
      if (std::isnan(y[i])) continue;
      if (std::isnan(y[imin]) || y[i] < y[imin]) imin = i;
      if (std::isnan(y[imax]) || y[i] > y[imax]) imax = i;
    }
    for (size_t i : {std::min(imin, imax), std::max(imin, imax)}) {
      ox.push_back(x[i]);
      oy.push_back(y[i]);
      if (imin == imax) break;
    }
  }
}

void header(std::ostringstream& os, const std::string& id, const std::string& title, int width,
            int height) {
  os << "<svg id=\"" << xml_escape(id) << "\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\""
     << " width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " "
     << height << "\" role=\"img\" aria-label=\"" << xml_escape(title) << "\">"
     << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
     << "\" fill=\"#ffffff\"/>"
     << "<text x=\"" << kMarginLeft << "\" y=\"18\" class=\"title\">" << xml_escape(title)
     << "</text>";
}

// Gridlines and labels of the y axis, the frame, and the axis titles.
void y_axis(std::ostringstream& os, const Axis& ay, ValueFormat format, int top, int bottom,
            int left, int right, const std::string& y_label) {
  const double span = ay.hi - ay.lo;
  const int ticks = static_cast<int>(std::round(span / ay.step));
  for (int i = 0; i <= ticks; ++i) {
    const double v = ay.lo + i * ay.step;
    const double py = bottom - (v - ay.lo) / span * (bottom - top);
    os << "<line x1=\"" << left << "\" y1=\"" << fmt("%.1f", py) << "\" x2=\"" << right
       << "\" y2=\"" << fmt("%.1f", py) << "\" class=\"grid\"/>"
       << "<text x=\"" << left - 6 << "\" y=\"" << fmt("%.1f", py + 4)
       << "\" class=\"tick\" text-anchor=\"end\">" << xml_escape(tick_label(v, ay.step, format))
       << "</text>";
  }
  os << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << right - left << "\" height=\""
     << bottom - top << "\" class=\"frame\"/>";
  const int cy = (top + bottom) / 2;
  os << "<text x=\"14\" y=\"" << cy << "\" class=\"axis-label\" text-anchor=\"middle\" "
     << "transform=\"rotate(-90 14 " << cy << ")\">" << xml_escape(y_label) << "</text>";
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_value(double v, ValueFormat format) {
  if (std::isnan(v)) return "-";
  if (format == ValueFormat::kBytes) {
    const double a = std::fabs(v);
    if (a >= 1e9) return fmt("%.3g GB", v / 1e9);
    if (a >= 1e6) return fmt("%.3g MB", v / 1e6);
    if (a >= 1e3) return fmt("%.3g kB", v / 1e3);
    return fmt("%.0f B", v);
  }
  const double a = std::fabs(v);
  if (a != 0.0 && (a < 1e-3 || a >= 1e6)) return fmt("%.3e", v);
  if (a >= 100) return fmt("%.1f", v);
  return fmt("%.4g", v);
}

namespace {

// The finite data's extent over every series; [0, 1] x [0, 1] when there is none.
struct DataRange {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  bool empty = false;
};

DataRange data_range(const LineChart& c) {
  DataRange r;
  for (const LineSeries& s : c.series) {
    for (size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      r.xmin = std::min(r.xmin, s.x[i]);
      r.xmax = std::max(r.xmax, s.x[i]);
      r.ymin = std::min(r.ymin, s.y[i]);
      r.ymax = std::max(r.ymax, s.y[i]);
    }
  }
  r.empty = !(r.xmax >= r.xmin);
  if (r.empty) r.xmin = 0, r.xmax = 1, r.ymin = 0, r.ymax = 1;
  if (c.y_from_zero) {
    r.ymin = std::min(r.ymin, 0.0);
    r.ymax = std::max(r.ymax, 0.0) * 1.05;  // headroom: a flat line at the max stays off the frame
  }
  return r;
}

// The plot area in pixels and its axes: data coordinates to SVG ones.
struct PlotFrame {
  int left, right, top, bottom;
  Axis ax, ay;
  double px(double x) const { return left + (x - ax.lo) / (ax.hi - ax.lo) * (right - left); }
  double py(double y) const { return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (bottom - top); }
};

// The x axis's ticks and labels, and its title at the foot of the chart.
void x_axis(std::ostringstream& os, const PlotFrame& f, const std::string& x_label, int height) {
  const int xticks = static_cast<int>(std::round((f.ax.hi - f.ax.lo) / f.ax.step));
  for (int i = 0; i <= xticks; ++i) {
    const double v = f.ax.lo + i * f.ax.step;
    os << "<line x1=\"" << fmt("%.1f", f.px(v)) << "\" y1=\"" << f.bottom << "\" x2=\""
       << fmt("%.1f", f.px(v)) << "\" y2=\"" << f.bottom + 4 << "\" class=\"axis\"/>"
       << "<text x=\"" << fmt("%.1f", f.px(v)) << "\" y=\"" << f.bottom + 17
       << "\" class=\"tick\" text-anchor=\"middle\">"
       << xml_escape(tick_label(v, f.ax.step, ValueFormat::kPlain)) << "</text>";
  }
  os << "<text x=\"" << (f.left + f.right) / 2 << "\" y=\"" << height - 8
     << "\" class=\"axis-label\" text-anchor=\"middle\">" << xml_escape(x_label) << "</text>";
}

// One series: a polyline per run of finite values (NaN, a missing or diverged value, leaves a
// gap), and a marker with a tooltip per point when asked.
void series_svg(std::ostringstream& os, const LineSeries& s, const PlotFrame& f,
                ValueFormat y_format) {
  std::vector<double> xs, ys;
  decimate(s.x, s.y, xs, ys);
  os << "<g class=\"series\" data-name=\"" << xml_escape(s.name) << "\"><title>"
     << xml_escape(s.name) << "</title>";
  std::string points;
  auto flush = [&] {
    if (!points.empty()) {
      os << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.8\""
         << (s.dashed ? " stroke-dasharray=\"6 4\"" : "") << " points=\"" << points << "\"/>";
    }
    points.clear();
  };
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!std::isfinite(xs[i]) || !std::isfinite(ys[i])) {
      flush();
      continue;
    }
    points += fmt("%.1f", f.px(xs[i])) + "," + fmt("%.1f", f.py(ys[i])) + " ";
    if (s.markers) {
      os << "<circle cx=\"" << fmt("%.1f", f.px(xs[i])) << "\" cy=\"" << fmt("%.1f", f.py(ys[i]))
         << "\" r=\"3.5\" fill=\"" << s.color << "\"><title>" << xml_escape(s.name) << " @ "
         << fmt("%.0f", xs[i]) << ": " << xml_escape(format_value(ys[i], y_format))
         << "</title></circle>";
    }
  }
  flush();
  os << "</g>";
}

}  // namespace

std::string render_line_chart(const LineChart& c, int width, int height) {
  const DataRange range = data_range(c);
  std::ostringstream os;
  header(os, c.id, c.title, width, height);
  std::vector<std::pair<std::string, std::string>> items;
  for (const LineSeries& s : c.series) items.emplace_back(s.name, s.color);
  // Lay out the legend first to know where the plot starts.
  std::ostringstream legend_svg;
  const int rows = legend(legend_svg, items, kMarginLeft, kTitleHeight + 14, width - 10, false);
  os << legend_svg.str();
  const PlotFrame f{kMarginLeft,
                    width - kMarginRight,
                    kTitleHeight + 10 + rows * kLegendRowHeight,
                    height - kMarginBottom,
                    nice_axis(range.xmin, range.xmax, 7),
                    nice_axis(range.ymin, range.ymax, 6)};
  y_axis(os, f.ay, c.y_format, f.top, f.bottom, f.left, f.right, c.y_label);
  x_axis(os, f, c.x_label, height);
  if (range.empty) {
    os << "<text x=\"" << (f.left + f.right) / 2 << "\" y=\"" << (f.top + f.bottom) / 2
       << "\" class=\"tick\" text-anchor=\"middle\">no data</text>";
  }
  for (const LineSeries& s : c.series) series_svg(os, s, f, c.y_format);
  os << "</svg>";
  return os.str();
}

std::string render_stacked_bar_chart(const StackedBarChart& c, int width, int height) {
  double ymax = 0.0;
  for (const BarStack& b : c.bars) {
    double sum = 0.0;
    for (double v : b.values) sum += std::isfinite(v) ? std::max(v, 0.0) : 0.0;
    ymax = std::max(ymax, sum);
  }
  std::ostringstream os;
  header(os, c.id, c.title, width, height);
  std::vector<std::pair<std::string, std::string>> items;
  for (size_t k = 0; k < c.categories.size(); ++k) {
    items.emplace_back(c.categories[k], c.colors[k % c.colors.size()]);
  }
  std::ostringstream legend_svg;
  const int rows = legend(legend_svg, items, kMarginLeft, kTitleHeight + 14, width - 10, true);
  const int top = kTitleHeight + 10 + rows * kLegendRowHeight;
  const int bottom = height - kMarginBottom - 14, left = kMarginLeft, right = width - kMarginRight;
  os << legend_svg.str();
  // 8% headroom keeps the total printed above the tallest bar inside the plot.
  const Axis ay = nice_axis(0.0, ymax > 0.0 ? ymax * 1.08 : 1.0, 6);
  y_axis(os, ay, c.y_format, top, bottom, left, right, c.y_label);
  auto py = [&](double y) { return bottom - (y - ay.lo) / (ay.hi - ay.lo) * (bottom - top); };
  const double slot = c.bars.empty() ? 0.0 : static_cast<double>(right - left) / c.bars.size();
  const double bar_w = std::min(80.0, slot * 0.6);
  for (size_t b = 0; b < c.bars.size(); ++b) {
    const BarStack& bar = c.bars[b];
    const double cx = left + slot * (b + 0.5);
    double base = 0.0, total = 0.0;
    os << "<g class=\"bar\" data-label=\"" << xml_escape(bar.label) << "\">";
    for (size_t k = 0; k < bar.values.size() && k < c.categories.size(); ++k) {
      const double v = std::isfinite(bar.values[k]) ? std::max(bar.values[k], 0.0) : 0.0;
      if (v <= 0.0) continue;
      os << "<rect x=\"" << fmt("%.1f", cx - bar_w / 2) << "\" y=\"" << fmt("%.1f", py(base + v))
         << "\" width=\"" << fmt("%.1f", bar_w) << "\" height=\""
         << fmt("%.1f", py(base) - py(base + v)) << "\" fill=\"" << c.colors[k % c.colors.size()]
         << "\"><title>" << xml_escape(bar.label) << " " << xml_escape(c.categories[k]) << ": "
         << xml_escape(format_value(v, c.y_format)) << "</title></rect>";
      base += v;
      total += v;
    }
    os << "<text x=\"" << fmt("%.1f", cx) << "\" y=\"" << fmt("%.1f", py(total) - 4)
       << "\" class=\"tick\" text-anchor=\"middle\">" << xml_escape(format_value(total, c.y_format))
       << "</text>";
    // Labels are "run / tier": two lines so long run names stay readable.
    const size_t cut = bar.label.find(" / ");
    const std::string l1 = cut == std::string::npos ? bar.label : bar.label.substr(0, cut);
    const std::string l2 = cut == std::string::npos ? "" : bar.label.substr(cut + 3);
    os << "<text x=\"" << fmt("%.1f", cx) << "\" y=\"" << bottom + 16
       << "\" class=\"tick\" text-anchor=\"middle\">" << xml_escape(l1) << "</text>";
    if (!l2.empty()) {
      os << "<text x=\"" << fmt("%.1f", cx) << "\" y=\"" << bottom + 30
         << "\" class=\"tick\" text-anchor=\"middle\">" << xml_escape(l2) << "</text>";
    }
    os << "</g>";
  }
  if (c.bars.empty()) {
    os << "<text x=\"" << (left + right) / 2 << "\" y=\"" << (top + bottom) / 2
       << "\" class=\"tick\" text-anchor=\"middle\">no memory data in the logs</text>";
  }
  os << "</svg>";
  return os.str();
}

}  // namespace zoff::report
