// A training run's JSONL log (one JSON object per optimizer step, plus events) read into memory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zoff::report {

// One optimizer step. Missing optional values are NaN.
struct LogStep {
  int64_t step = 0;
  double loss = 0.0;
  double lr = 0.0;             // NaN if absent
  double grad_norm = 0.0;      // NaN if absent
  double samples_per_s = 0.0;  // NaN if absent
  double tokens_per_s = 0.0;   // NaN if absent
  // Model-state bytes by "tier/category": a flat mem {"params": B, ...} gives tier "device";
  // mem {"compute": {"params": B}, "offload": {"optim": B}} gives "compute/params",
  // "offload/optim". Deeper nesting joins the rest of the path with '.'.
  std::map<std::string, double> mem_bytes;
};

// A line with an "event" key, e.g. {"event": "eval", "step": 100, "val_loss": 2.1,
// "accuracy": 0.4}: every numeric field except step goes to `values`.
struct LogEvent {
  std::string event;
  int64_t step = 0;
  std::map<std::string, double> values;
};

struct RunLog {
  std::string name;  // shown in legends: the file name without .jsonl
  std::string path;
  std::vector<LogStep> steps;  // in file order
  std::vector<LogEvent> events;
  // The last line had no '\n' and was not valid JSON: a run killed mid-write. It is left
  // out (the steps before it are whole); `zoff report` says so in a warning.
  bool cut_last_line = false;
};

// Parses JSONL text. `source` names the text in errors ("run.jsonl:12: ..."). Blank lines
// are skipped. A malformed line, a step line without an integer "step" and a numeric
// "loss" (null is allowed: a diverged step), a wrong-typed field, or no step lines at all
// is a zoff::UsageError naming the line, except a malformed last line without '\n' (see
// RunLog::cut_last_line).
RunLog parse_training_log(const std::string& text, const std::string& source);

// Reads and parses a file; a missing or unreadable file is a UsageError naming it.
RunLog read_training_log(const std::string& path);

}  // namespace zoff::report
