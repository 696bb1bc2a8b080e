// StepTicker: while an optimizer step runs longer than a few seconds (a model from disk), a
// line on stderr at a fixed interval saying how far the step got.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

#include "zoff/engine/step_meter.h"

namespace zoff::train {

// What a step's progress line counts against.
struct StepTotals {
  int64_t step = 0;         // the step running, 1-based
  int64_t total_steps = 0;  // of the run
  int64_t units = 0;        // stage 3's units (0: none)
  int64_t groups = 0;       // the disk step's sub-groups (0: no disk store)
};

// "step 4/10, 30 s in: forward 20/38 units, backward 0/38 units, disk step 3/1133
// sub-groups, I/O wait 2.1 s (parameters 1.2, gradient window 0.0, disk step 0.9)"; the
// unit and sub-group parts only where there are units and sub-groups.
std::string step_progress_line(const StepTotals& totals, double seconds,
                               const engine::StepProgress& p);

class StepTicker {
 public:
  // Every `every` while a step runs (from its begin_step), writes line(seconds into the
  // step) and a newline to `out`. `every` of zero or less: no thread, nothing written.
  StepTicker(std::chrono::milliseconds every, std::function<std::string(double)> line,
             std::ostream& out);
  ~StepTicker();
  StepTicker(const StepTicker&) = delete;
  StepTicker& operator=(const StepTicker&) = delete;

  void begin_step();
  // No line after this returns (one being written is finished first).
  void end_step();

 private:
  void loop();

  std::chrono::milliseconds every_;
  std::function<std::string(double)> line_;
  std::ostream& out_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool in_step_ = false;
  bool stop_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point next_;
  std::thread thread_;
};

}  // namespace zoff::train
