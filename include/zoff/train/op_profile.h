// Where a training step's time goes: LibTorch's op callbacks on the calling thread over a
// span of steps, aggregated by op name into a table of self and total CPU time per step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zoff::train {

// One op (or zoff phase, "zoff::...") over the profiled steps. Microseconds.
struct OpTime {
  std::string name;
  int64_t calls = 0;
  double self_us = 0;         // inside the op and not inside an op it called
  double total_us = 0;        // inside the op, the ops it called included (outermost calls only)
  bool other_thread = false;  // ran on another thread than the one that called start()
};

// Records every op (ATen operators, autograd nodes, zoff's phases) that runs on the thread
// that called start() and the threads LibTorch propagates its thread-local callbacks to,
// until stop(). Events go to a buffer mapped at start(), outside the heap, so the profiled
// steps find their memory where unprofiled ones do (LibTorch's profilers do not: see
// src/train/op_event_recorder.h). One at a time per process: a second start() throws
// zoff::Error, as does stop() without start().
class OpProfile {
 public:
  OpProfile() = default;
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;
  ~OpProfile();  // stops a profile still running (its events are dropped)

  void start();
  // Stops and aggregates; `steps` steps ran in `wall_seconds` since start().
  void stop(int64_t steps, double wall_seconds);

  const std::vector<OpTime>& ops() const { return ops_; }  // by self time, largest first
  // A text table of the `top` ops with the most self time, then the engine's own scopes
  // (zoff::*) that rank lower, so that zoff's phases always show however small: per step,
  // in ms and in % of the step's wall time, then what the listed ops of the calling thread
  // leave of it. Ops of other threads are rows of their own, marked "bg: " (with a line
  // saying so under the table), and not subtracted from the step.
  std::string table(size_t top) const;

 private:
  bool running_ = false;
  int64_t steps_ = 0;
  double wall_seconds_ = 0;
  std::vector<OpTime> ops_;
};

// The placeholder a --profile file name may hold to give each rank its own table.
constexpr const char* kRankPlaceholder = "{rank}";

// `path` with each "{rank}" of its file name replaced by `rank` (unchanged without one).
// Throws zoff::UsageError naming the path if a directory part holds "{rank}": every rank
// writes into the same, checked directory.
std::string rank_profile_path(const std::string& path, int rank);

// An OpProfile over steps [first, first + count) of a training loop, written as a table to
// rank_profile_path(path, rank) (temp file and rename) by rank 0, or by every rank when the
// file name holds "{rank}"; does nothing when path is empty.
class StepSpanProfile {
 public:
  StepSpanProfile(const std::string& path, int64_t first, int64_t count, int rank);
  void before_step(int64_t step);  // starts at step `first`
  void after_step(int64_t step);   // stops after step first + count - 1 and writes

 private:
  std::string path_;
  int64_t first_, count_;
  bool write_;
  OpProfile profile_;
  double started_ = 0;  // steady-clock seconds at start()
};

}  // namespace zoff::train
