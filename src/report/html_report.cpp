// Renders training logs into one self-contained HTML page with inline SVG charts.
#include "zoff/report/html_report.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "zoff/core/error.h"
#include "zoff/core/output_path.h"
#include "zoff/report/svg_chart.h"

namespace zoff::report {
namespace {

constexpr int kChartWidth = 540, kChartHeight = 320;
const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr size_t kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

const char* color(size_t i) { return kPalette[i % kPaletteSize]; }

// Sum of every memory leaf of one step, in bytes.
double step_total_bytes(const LogStep& s) {
  double sum = 0.0;
  for (const auto& [key, bytes] : s.mem_bytes) sum += bytes;
  return s.mem_bytes.empty() ? NAN : sum;
}

template <typename Field>
LineSeries series_of(const RunLog& run, size_t index, Field field) {
  LineSeries s;
  s.name = run.name;
  s.color = color(index);
  for (const LogStep& st : run.steps) {
    s.x.push_back(static_cast<double>(st.step));
    s.y.push_back(field(st));
  }
  return s;
}

template <typename Field>
bool any_finite(const std::vector<RunLog>& runs, Field field) {
  for (const RunLog& r : runs) {
    for (const LogStep& s : r.steps) {
      if (std::isfinite(field(s))) return true;
    }
  }
  return false;
}

double last_finite_loss(const RunLog& r) {
  for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it) {
    if (std::isfinite(it->loss)) return it->loss;
  }
  return NAN;
}

double mean_finite(const RunLog& r, double LogStep::*field) {
  double sum = 0.0;
  size_t n = 0;
  for (const LogStep& s : r.steps) {
    if (std::isfinite(s.*field)) {
      sum += s.*field;
      ++n;
    }
  }
  return n == 0 ? NAN : sum / static_cast<double>(n);
}

double peak_bytes(const RunLog& r) {
  double peak = NAN;
  for (const LogStep& s : r.steps) {
    const double t = step_total_bytes(s);
    if (std::isfinite(t) && !(peak >= t)) peak = t;
  }
  return peak;
}

void summary_table(std::ostringstream& os, const std::vector<RunLog>& runs) {
  const bool tokens = any_finite(runs, [](const LogStep& s) { return s.tokens_per_s; });
  os << "<table id=\"summary\"><thead><tr><th>run</th><th>steps</th><th>last step</th>"
     << "<th>final loss</th><th>min loss</th><th>final lr</th><th>mean samples/s</th>"
     << (tokens ? "<th>mean tokens/s</th>" : "") << "<th>peak memory</th><th>evals</th>"
     << "</tr></thead><tbody>";
  for (const RunLog& r : runs) {
    double min_loss = NAN;
    for (const LogStep& s : r.steps) {
      if (std::isfinite(s.loss) && !(min_loss <= s.loss)) min_loss = s.loss;
    }
    os << "<tr><td title=\"" << xml_escape(r.path) << "\">" << xml_escape(r.name) << "</td><td>"
       << r.steps.size() << "</td><td>" << r.steps.back().step << "</td><td>"
       << format_value(last_finite_loss(r), ValueFormat::kPlain) << "</td><td>"
       << format_value(min_loss, ValueFormat::kPlain) << "</td><td>"
       << format_value(r.steps.back().lr, ValueFormat::kPlain) << "</td><td>"
       << format_value(mean_finite(r, &LogStep::samples_per_s), ValueFormat::kPlain) << "</td>";
    if (tokens) {
      os << "<td>" << format_value(mean_finite(r, &LogStep::tokens_per_s), ValueFormat::kPlain)
         << "</td>";
    }
    os << "<td>" << format_value(peak_bytes(r), ValueFormat::kBytes) << "</td><td>"
       << r.events.size() << "</td></tr>";
  }
  os << "</tbody></table>";
}

// Peak bytes of every tier/category leaf, stacked by category, one bar per run and tier.
StackedBarChart memory_bars(const std::vector<RunLog>& runs) {
  StackedBarChart c;
  c.id = "chart-memory";
  c.title = "Peak memory by tier and category";
  c.y_label = "bytes";
  std::set<std::string> categories;
  for (const RunLog& r : runs) {
    for (const LogStep& s : r.steps) {
      for (const auto& [key, bytes] : s.mem_bytes) categories.insert(key.substr(key.find('/') + 1));
    }
  }
  c.categories.assign(categories.begin(), categories.end());
  for (size_t k = 0; k < c.categories.size(); ++k) c.colors.push_back(color(k + 2));
  for (const RunLog& r : runs) {
    std::map<std::string, std::map<std::string, double>> peak;  // tier -> category -> bytes
    for (const LogStep& s : r.steps) {
      for (const auto& [key, bytes] : s.mem_bytes) {
        const size_t slash = key.find('/');
        double& p = peak[key.substr(0, slash)][key.substr(slash + 1)];
        p = std::max(p, bytes);
      }
    }
    for (const auto& [tier, by_category] : peak) {
      BarStack bar;
      bar.label = r.name + " / " + tier;
      for (const std::string& cat : c.categories) {
        auto it = by_category.find(cat);
        bar.values.push_back(it == by_category.end() ? 0.0 : it->second);
      }
      c.bars.push_back(std::move(bar));
    }
  }
  return c;
}

LineChart memory_over_steps(const std::vector<RunLog>& runs) {
  LineChart c;
  c.id = "chart-memory-steps";
  c.title = "Memory per tier over steps";
  c.x_label = "optimizer step";
  c.y_label = "bytes";
  c.y_format = ValueFormat::kBytes;
  c.y_from_zero = true;
  size_t index = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    std::set<std::string> tiers;
    for (const LogStep& s : runs[r].steps) {
      for (const auto& [key, bytes] : s.mem_bytes) tiers.insert(key.substr(0, key.find('/')));
    }
    for (const std::string& tier : tiers) {
      LineSeries s;
      s.name = runs[r].name + " / " + tier;
      s.color = color(index++);
      for (const LogStep& st : runs[r].steps) {
        double sum = 0.0;
        bool any = false;
        for (const auto& [key, bytes] : st.mem_bytes) {
          if (key.compare(0, tier.size() + 1, tier + "/") == 0) {
            sum += bytes;
            any = true;
          }
        }
        s.x.push_back(static_cast<double>(st.step));
        s.y.push_back(any ? sum : NAN);
      }
      c.series.push_back(std::move(s));
    }
  }
  return c;
}

// Eval events: val_loss joins the loss chart; every other numeric field gets a chart.
std::vector<LineChart> eval_charts(const std::vector<RunLog>& runs, LineChart& loss) {
  std::set<std::string> metrics;
  for (size_t r = 0; r < runs.size(); ++r) {
    LineSeries val;
    val.name = runs[r].name + " (eval)";
    val.color = color(r);
    val.dashed = true;
    val.markers = true;
    for (const LogEvent& e : runs[r].events) {
      for (const auto& [key, value] : e.values) {
        if (key == "val_loss" || key == "loss") {
          val.x.push_back(static_cast<double>(e.step));
          val.y.push_back(value);
        } else {
          metrics.insert(key);
        }
      }
    }
    if (!val.x.empty()) loss.series.push_back(std::move(val));
  }
  std::vector<LineChart> charts;
  for (const std::string& metric : metrics) {
    LineChart c;
    std::string id;
    for (char ch : metric) id += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
    c.id = "chart-eval-" + id;
    c.title = "Eval: " + metric;
    c.x_label = "optimizer step";
    c.y_label = metric;
    for (size_t r = 0; r < runs.size(); ++r) {
      LineSeries s;
      s.name = runs[r].name;
      s.color = color(r);
      s.markers = true;
      for (const LogEvent& e : runs[r].events) {
        auto it = e.values.find(metric);
        if (it == e.values.end()) continue;
        s.x.push_back(static_cast<double>(e.step));
        s.y.push_back(it->second);
      }
      if (!s.x.empty()) c.series.push_back(std::move(s));
    }
    charts.push_back(std::move(c));
  }
  return charts;
}

const char* kStyle = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 16px; color: #222;
       background: #f6f7f9; }
h1 { font-size: 22px; margin: 0 0 4px 0; }
p.sub { color: #666; margin: 0 0 16px 0; font-size: 13px; }
table { border-collapse: collapse; background: #fff; margin-bottom: 20px; font-size: 13px; }
th, td { border: 1px solid #d8dbe0; padding: 5px 10px; text-align: right; }
th { background: #eef0f4; } td:first-child, th:first-child { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
.card { background: #fff; border: 1px solid #d8dbe0; border-radius: 6px; padding: 6px; }
svg.chart text { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; }
svg .title { font-size: 14px; font-weight: bold; fill: #222; }
svg .legend { font-size: 12px; fill: #333; }
svg .tick { font-size: 11px; fill: #555; }
svg .axis-label { font-size: 12px; fill: #333; }
svg .grid { stroke: #e6e8ec; stroke-width: 1; }
svg .axis { stroke: #888; stroke-width: 1; }
svg .frame { fill: none; stroke: #888; stroke-width: 1; }
)";

void write_atomically(const std::string& path, const std::string& content) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::string tmp = (slash == std::string::npos ? std::string("") : dir + "/") + "." +
                    path.substr(slash == std::string::npos ? 0 : slash + 1) + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "report: cannot create a temporary file in '" + dir + "' for '" + path +
                            "': " + std::strerror(err);
    // A directory that is missing or not ours is a bad --out, not a failure of zoff.
    if (err == ENOENT || err == ENOTDIR || err == EACCES || err == EROFS) throw UsageError(msg);
    throw Error(msg);
  }
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(std::string("report: ") + what + " '" + path + "': " + std::strerror(err));
  };
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write");
    done += static_cast<size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) fail("cannot chmod");
  if (::fsync(fd) != 0) fail("cannot fsync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error("report: cannot close '" + path + "': " + std::strerror(errno));
  }
  try {
    check_replaceable("report: --out", path);  // again: it may have appeared meanwhile
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("report: cannot rename to '" + path + "': " + std::strerror(err));
  }
}

}  // namespace

namespace {

// Legends need distinct names: a.jsonl from two directories becomes "a" and "a (2)".
std::vector<RunLog> with_distinct_names(const std::vector<RunLog>& input) {
  std::vector<RunLog> runs = input;
  std::map<std::string, int> seen;
  for (RunLog& r : runs) {
    if (++seen[r.name] > 1) r.name += " (" + std::to_string(seen[r.name]) + ")";
  }
  return runs;
}

// A chart of one per-step field of every run against the optimizer step.
LineChart step_chart(const std::vector<RunLog>& runs, const char* id, const char* title,
                     const char* y_label, bool from_zero, double LogStep::*field) {
  LineChart c;
  c.id = id;
  c.title = title;
  c.x_label = "optimizer step";
  c.y_label = y_label;
  c.y_from_zero = from_zero;
  for (size_t r = 0; r < runs.size(); ++r) {
    c.series.push_back(series_of(runs[r], r, [field](const LogStep& s) { return s.*field; }));
  }
  return c;
}

// Every chart of the report, as SVG, in page order; a field no run logged gets no chart.
std::vector<std::string> chart_svgs(const std::vector<RunLog>& runs) {
  LineChart loss = step_chart(runs, "chart-loss", "Training loss", "loss", false, &LogStep::loss);
  // Adds the eval losses to `loss` as dashed series, and returns the other eval metrics' charts.
  const std::vector<LineChart> evals = eval_charts(runs, loss);
  std::vector<std::string> svgs;
  auto line = [&](const LineChart& c) {
    svgs.push_back(render_line_chart(c, kChartWidth, kChartHeight));
  };
  line(loss);
  line(step_chart(runs, "chart-lr", "Learning rate", "lr", true, &LogStep::lr));
  line(step_chart(runs, "chart-throughput", "Throughput", "samples / s", true,
                  &LogStep::samples_per_s));
  if (any_finite(runs, [](const LogStep& s) { return s.tokens_per_s; })) {
    line(step_chart(runs, "chart-tokens", "Token throughput", "tokens / s", true,
                    &LogStep::tokens_per_s));
  }
  if (any_finite(runs, [](const LogStep& s) { return s.grad_norm; })) {
    line(step_chart(runs, "chart-grad-norm", "Gradient norm", "grad norm", true,
                    &LogStep::grad_norm));
  }
  svgs.push_back(render_stacked_bar_chart(memory_bars(runs), kChartWidth, kChartHeight));
  line(memory_over_steps(runs));
  for (const LineChart& c : evals) line(c);
  return svgs;
}

}  // namespace

std::string render_html_report(const std::vector<RunLog>& input) {
  ZOFF_CHECK_ARG(!input.empty(), "report: no runs given");
  const std::vector<RunLog> runs = with_distinct_names(input);
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
     << "<title>zoff training report</title><style>" << kStyle << "</style></head><body>"
     << "<h1>zoff training report</h1><p class=\"sub\">";
  for (size_t r = 0; r < runs.size(); ++r) {
    os << (r ? ", " : "") << xml_escape(runs[r].path);
  }
  os << "</p>";
  summary_table(os, runs);
  os << "<div class=\"charts\">";
  for (const std::string& svg : chart_svgs(runs)) os << "<div class=\"card\">" << svg << "</div>";
  os << "</div></body></html>\n";
  return os.str();
}

std::vector<std::string> write_html_report(const std::vector<std::string>& log_paths,
                                           const std::string& out_path) {
  ZOFF_CHECK_ARG(!log_paths.empty(), "report: no log files given");
  ZOFF_CHECK_ARG(!out_path.empty(), "report: --out is empty");
  check_output_path("report: --out", out_path);  // before reading: never replace what is not ours
  std::vector<RunLog> runs;
  std::vector<std::string> warnings;
  for (const std::string& p : log_paths) {
    runs.push_back(read_training_log(p));
    if (runs.back().cut_last_line) {
      warnings.push_back(p + ": the last line is cut (a killed run?); left out");
    }
  }
  write_atomically(out_path, render_html_report(runs));
  return warnings;
}

}  // namespace zoff::report
