// StepMeter: what the step in progress has done so far (units through forward and backward,
// optimizer sub-groups) and how long it waited for the disk, readable from another thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace zoff::engine {

// A snapshot of the step in progress (StepMeter::snapshot).
struct StepProgress {
  int64_t forward_units = 0;   // stage-3 units that entered forward (each once per step)
  int64_t backward_units = 0;  // stage-3 units whose gradients are out (each once per step)
  int64_t groups_done = 0;     // sub-groups the disk store's step updated
  // Milliseconds waited for the disk: by forward and backward for a parameter piece; by
  // backward for a free buffer of the streamed-gradient window (the step's I/O behind);
  // by the disk step's worker for its reads and write-backs (overlapped with backward
  // until the last sub-group).
  double io_params_ms = 0.0;
  double io_grad_window_ms = 0.0;
  double io_optimizer_ms = 0.0;
};

// Counters the engine's parts add to while a step runs; reset by the engine when a step
// ends. All members are atomics: the disk step's worker and the progress printer run on
// threads of their own.
class StepMeter {
 public:
  enum class Wait { kParams, kGradWindow, kOptimizer };

  void forward_unit() { forward_.fetch_add(1, std::memory_order_relaxed); }
  // Advances with every reset(): a unit counted in this epoch is not counted again (a
  // second micro-batch, a recomputation, a module used twice).
  int64_t epoch() const { return epoch_.load(std::memory_order_relaxed); }
  void backward_unit() { backward_.fetch_add(1, std::memory_order_relaxed); }
  void group_done() { groups_.fetch_add(1, std::memory_order_relaxed); }
  void add_wait(Wait kind, std::chrono::steady_clock::duration d) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    wait_ns(kind).fetch_add(ns, std::memory_order_relaxed);
  }

  StepProgress snapshot() const {
    StepProgress p;
    p.forward_units = forward_.load(std::memory_order_relaxed);
    p.backward_units = backward_.load(std::memory_order_relaxed);
    p.groups_done = groups_.load(std::memory_order_relaxed);
    p.io_params_ms = static_cast<double>(params_ns_.load(std::memory_order_relaxed)) * 1e-6;
    p.io_grad_window_ms = static_cast<double>(window_ns_.load(std::memory_order_relaxed)) * 1e-6;
    p.io_optimizer_ms = static_cast<double>(optimizer_ns_.load(std::memory_order_relaxed)) * 1e-6;
    return p;
  }
  void reset() {
    for (auto* a : {&forward_, &backward_, &groups_, &params_ns_, &window_ns_, &optimizer_ns_}) {
      a->store(0, std::memory_order_relaxed);
    }
    epoch_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t>& wait_ns(Wait kind) {
    return kind == Wait::kParams       ? params_ns_
           : kind == Wait::kGradWindow ? window_ns_
                                       : optimizer_ns_;
  }
  std::atomic<int64_t> forward_{0}, backward_{0}, groups_{0};
  std::atomic<int64_t> params_ns_{0}, window_ns_{0}, optimizer_ns_{0};
  std::atomic<int64_t> epoch_{1};
};

// Adds the time from construction to destruction to `meter` (nothing when null).
class ScopedWait {
 public:
  ScopedWait(StepMeter* meter, StepMeter::Wait kind)
      : meter_(meter), kind_(kind), start_(std::chrono::steady_clock::now()) {}
  ~ScopedWait() {
    if (meter_ != nullptr) meter_->add_wait(kind_, std::chrono::steady_clock::now() - start_);
  }
  ScopedWait(const ScopedWait&) = delete;
  ScopedWait& operator=(const ScopedWait&) = delete;

 private:
  StepMeter* meter_;
  StepMeter::Wait kind_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace zoff::engine
