// One JSON object per optimizer step (and per evaluation), appended to a JSONL file.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "zoff/engine/memory_stats.h"
#include "zoff/engine/step_times.h"

namespace zoff::train {

struct StepRecord {
  int64_t step = 0;
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double samples_per_s = 0.0;
  double tokens_per_s = 0.0;  // 0 when the task has no tokens
  bool skipped = false;       // fp16 overflow: no update this step
  double loss_scale = 0.0;    // fp16 only
  engine::MemoryStats mem;
  // Several ranks: the transport (Comm::backend(): "shm", "gloo", "shm+gloo") and how many
  // hosts the ranks are on (written as "comm": {"transport": ..., "hosts": ...}).
  std::string transport;
  int hosts = 0;
  // This process's peak resident memory so far (VmHWM), bytes: everything, not only
  // model states (LibTorch, activations, I/O buffers). 0 = not known.
  int64_t peak_rss = 0;
  // wall_clock_breakdown: the step's phase times (written as "times_ms").
  bool timed = false;
  double forward_ms = 0.0;  // the task's forward and loss, over the micro-batches
  engine::StepTimes times;
};

// The console line of a timed record, DeepSpeed's wall_clock_breakdown line in zoff's words:
// "step 10 | time (ms): forward 231.5 | backward 410.2 (reduce wait 8.1) | step 30.3
// (grad norm 3.0, optimizer 4.1, allgather 17.5)", and with a disk tier " | I/O wait 52.0
// (parameters 40.1, gradient window 0.0, disk step 11.9)".
std::string step_times_line(const StepRecord& record);

// Writes lines as they come (flushed each time, so a killed run keeps its log). An empty
// path writes nothing (ranks other than 0).
class StepLog {
 public:
  // `append` keeps an existing log (a resumed run continues it).
  explicit StepLog(const std::string& path, bool append = false);
  ~StepLog();
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;
  void write_step(const StepRecord& record);
  void write_eval(int64_t step, const std::map<std::string, double>& metrics);
  // The JSON text of one step record (no newline).
  static std::string to_json(const StepRecord& record);

 private:
  void write_line(const std::string& line);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace zoff::train
