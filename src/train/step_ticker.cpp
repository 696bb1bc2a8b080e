// StepTicker: a thread that writes the running step's progress line at a fixed interval.
#include "zoff/train/step_ticker.h"

#include <cstdio>

namespace zoff::train {

std::string step_progress_line(const StepTotals& t, double seconds, const engine::StepProgress& p) {
  char buf[384];
  int n =
      std::snprintf(buf, sizeof buf, "step %lld/%lld, %.0f s in:", static_cast<long long>(t.step),
                    static_cast<long long>(t.total_steps), seconds);
  auto add = [&](const char* fmt, auto... args) {
    if (n > 0 && static_cast<size_t>(n) < sizeof buf) {
      n += std::snprintf(buf + n, sizeof buf - static_cast<size_t>(n), fmt, args...);
    }
  };
  if (t.units > 0) {
    add(" forward %lld/%lld units, backward %lld/%lld units,",
        static_cast<long long>(p.forward_units), static_cast<long long>(t.units),
        static_cast<long long>(p.backward_units), static_cast<long long>(t.units));
  }
  if (t.groups > 0) {
    add(" disk step %lld/%lld sub-groups,", static_cast<long long>(p.groups_done),
        static_cast<long long>(t.groups));
  }
  const double io = p.io_params_ms + p.io_grad_window_ms + p.io_optimizer_ms;
  add(" I/O wait %.1f s (parameters %.1f, gradient window %.1f, disk step %.1f)", io / 1e3,
      p.io_params_ms / 1e3, p.io_grad_window_ms / 1e3, p.io_optimizer_ms / 1e3);
  return buf;
}

StepTicker::StepTicker(std::chrono::milliseconds every, std::function<std::string(double)> line,
                       std::ostream& out)
    : every_(every), line_(std::move(line)), out_(out) {
  if (every_.count() > 0) thread_ = std::thread([this] { loop(); });
}

StepTicker::~StepTicker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StepTicker::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  in_step_ = true;
  start_ = std::chrono::steady_clock::now();
  next_ = start_ + every_;
  wake_.notify_all();
}

void StepTicker::end_step() {
  std::lock_guard<std::mutex> lock(mutex_);  // waits for a line being written
  in_step_ = false;
}

// Sleeps until the next line is due (or a step begins, or the end); writes it while holding
// the lock, so end_step() never returns with a line half written.
void StepTicker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    if (!in_step_) {
      wake_.wait(lock, [&] { return stop_ || in_step_; });
      continue;
    }
    const auto due = next_;
    if (wake_.wait_until(lock, due, [&] { return stop_ || !in_step_ || next_ != due; })) continue;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    out_ << line_(seconds) << std::endl;
    next_ = due + every_;
  }
}

}  // namespace zoff::train
