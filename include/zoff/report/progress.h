// The training loop's progress line: a redrawn bar on a terminal, plain lines otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <string>

namespace zoff::report {

// What one optimizer step reports.
struct ProgressStep {
  int64_t step = 0;         // optimizer steps completed, 1..total_steps
  int64_t total_steps = 0;  // 0 = unknown (no bar, no ETA)
  double loss = std::numeric_limits<double>::quiet_NaN();
  double lr = std::numeric_limits<double>::quiet_NaN();
  double samples_per_s = std::numeric_limits<double>::quiet_NaN();
  double tokens_per_s = std::numeric_limits<double>::quiet_NaN();  // NaN: not shown
  int64_t mem_bytes = -1;                                          // < 0: not shown
};

struct ProgressOptions {
  int64_t print_every = 10;       // non-terminal: one line every this many steps (steps_per_print)
  int width = 0;                  // terminal columns; 0 = $COLUMNS, else 100
  double redraw_seconds = 0.1;    // terminal: redraw at most this often (the last step always)
  std::function<double()> clock;  // seconds, monotonic; default std::chrono::steady_clock
};

class ProgressDisplay {
 public:
  // Writes to `out`. On a terminal (`is_tty`) each update redraws one line in place
  // ("\r" + erase line); otherwise a plain line is printed every options.print_every steps
  // and at the last step.
  ProgressDisplay(std::ostream& out, bool is_tty, ProgressOptions options = {});
  ~ProgressDisplay();
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  // Progress on stderr, redrawn when stderr is a terminal.
  static ProgressDisplay on_stderr(ProgressOptions options = {});

  void update(const ProgressStep& s);
  // Ends a redrawn line with a newline (also done by the destructor).
  void finish();

  // The plain (non-terminal) text of one step, without newline, e.g.
  // "step 20/100 | loss 2.3456 | lr 3.000e-04 | 512.0 samples/s | mem 1.23 GB | eta 0:00:41".
  // `eta_seconds` < 0 leaves the ETA out.
  static std::string format_line(const ProgressStep& s, double eta_seconds);
  // "[#######.......] " bar of `width` cells for step/total.
  static std::string format_bar(int64_t step, int64_t total, int width);
  // "1:02:03", "0:00:41".
  static std::string format_duration(double seconds);

 private:
  double now() const;
  double eta(const ProgressStep& s, double t) const;

  std::ostream& out_;
  bool is_tty_;
  ProgressOptions options_;
  double start_time_ = -1.0;
  int64_t start_step_ = 0;
  double last_draw_ = -1.0;
  bool line_open_ = false;  // a redrawn line without its newline yet
};

}  // namespace zoff::report
