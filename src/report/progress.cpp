// Progress line for the training loop: bar + step/total, loss, throughput, ETA, memory.
#include "zoff/report/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "zoff/core/error.h"
#include "zoff/report/svg_chart.h"

namespace zoff::report {

ProgressDisplay::ProgressDisplay(std::ostream& out, bool is_tty, ProgressOptions options)
    : out_(out), is_tty_(is_tty), options_(std::move(options)) {
  ZOFF_CHECK_ARG(options_.print_every >= 1, "progress: print_every = ", options_.print_every,
                 ": must be >= 1");
  if (options_.width <= 0) {
    const char* cols = std::getenv("COLUMNS");
    options_.width = cols != nullptr ? std::atoi(cols) : 0;
    if (options_.width < 40) options_.width = 100;
  }
}

ProgressDisplay::~ProgressDisplay() { finish(); }

ProgressDisplay ProgressDisplay::on_stderr(ProgressOptions options) {
  return ProgressDisplay(std::cerr, ::isatty(STDERR_FILENO) == 1, std::move(options));
}

double ProgressDisplay::now() const {
  if (options_.clock) return options_.clock();
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Remaining steps at the mean rate since the first update.
double ProgressDisplay::eta(const ProgressStep& s, double t) const {
  if (s.total_steps <= 0 || start_time_ < 0.0 || s.step <= start_step_) return -1.0;
  const double per_step = (t - start_time_) / static_cast<double>(s.step - start_step_);
  return per_step * static_cast<double>(std::max<int64_t>(0, s.total_steps - s.step));
}

std::string ProgressDisplay::format_duration(double seconds) {
  const long long s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

std::string ProgressDisplay::format_bar(int64_t step, int64_t total, int width) {
  if (total <= 0 || width <= 0) return "";
  const double frac = std::min(1.0, std::max(0.0, static_cast<double>(step) / total));
  const int filled = static_cast<int>(frac * width);
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
}

std::string ProgressDisplay::format_line(const ProgressStep& s, double eta_seconds) {
  char buf[96];
  std::string line = "step " + std::to_string(s.step);
  if (s.total_steps > 0) line += "/" + std::to_string(s.total_steps);
  if (!std::isnan(s.loss)) {
    std::snprintf(buf, sizeof(buf), " | loss %.4f", s.loss);
    line += buf;
  }
  if (!std::isnan(s.lr)) {
    std::snprintf(buf, sizeof(buf), " | lr %.3e", s.lr);
    line += buf;
  }
  if (!std::isnan(s.samples_per_s)) {
    std::snprintf(buf, sizeof(buf), " | %.1f samples/s", s.samples_per_s);
    line += buf;
  }
  if (!std::isnan(s.tokens_per_s)) {
    std::snprintf(buf, sizeof(buf), " | %.0f tokens/s", s.tokens_per_s);
    line += buf;
  }
  if (s.mem_bytes >= 0) {
    line += " | mem " + format_value(static_cast<double>(s.mem_bytes), ValueFormat::kBytes);
  }
  if (eta_seconds >= 0.0) line += " | eta " + format_duration(eta_seconds);
  return line;
}

void ProgressDisplay::update(const ProgressStep& s) {
  const double t = now();
  if (start_time_ < 0.0) {
    // The first step includes warm-up (allocation, first touches): time from its end.
    start_time_ = t;
    start_step_ = s.step;
  }
  const bool last = s.total_steps > 0 && s.step >= s.total_steps;
  if (!is_tty_) {
    if (s.step % options_.print_every == 0 || last) {
      out_ << format_line(s, eta(s, t)) << '\n';
      out_.flush();
    }
    return;
  }
  if (!last && last_draw_ >= 0.0 && t - last_draw_ < options_.redraw_seconds) return;
  last_draw_ = t;
  std::string text = format_line(s, eta(s, t));
  const int bar_cells = std::min(30, options_.width / 4);
  std::string line = format_bar(s.step, s.total_steps, bar_cells) + text;
  if (static_cast<int>(line.size()) > options_.width - 1) line.resize(options_.width - 1);
  out_ << "\r\033[K" << line;
  line_open_ = true;
  if (last) finish();
  out_.flush();
}

void ProgressDisplay::finish() {
  if (line_open_) {
    out_ << '\n';
    out_.flush();
    line_open_ = false;
  }
}

}  // namespace zoff::report
