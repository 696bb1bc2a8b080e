// OpProfile: the op events of op_event_recorder.h, folded into per-op self/total time.
#include "zoff/train/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>

#include "op_event_recorder.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/core/error.h"

namespace zoff::train {
namespace {

// Marks the table's rows of ops that ran on another thread than the one that started.
constexpr const char* kOtherThreadMark = "bg: ";

// An op whose end has not been seen yet, with the time its callees took.
struct Open {
  const detail::OpEvent* start;
  double child_us = 0;
};

// Folds one thread's start/end events (properly nested on a thread) into `by_name`. An end
// whose start came before the recording is dropped, as is a start that never ended.
void fold_thread(const std::vector<detail::OpEvent>& events, bool other_thread,
                 std::map<std::pair<bool, std::string>, OpTime>* by_name) {
  std::vector<Open> open;
  std::map<std::string, int> depth;  // open calls per name: a recursive call is not re-added
  for (const auto& e : events) {
    if (e.start) {
      open.push_back({&e});
      ++depth[e.name];
    } else if (!open.empty()) {
      const Open o = open.back();
      open.pop_back();
      const double us = static_cast<double>(e.ns - o.start->ns) / 1e3;
      OpTime& t = (*by_name)[{other_thread, o.start->name}];
      t.name = o.start->name;
      t.other_thread = other_thread;
      ++t.calls;
      t.self_us += us - o.child_us;
      if (--depth[t.name] == 0) t.total_us += us;
      if (!open.empty()) open.back().child_us += us;
    }
  }
}

}  // namespace

OpProfile::~OpProfile() {
  if (!running_) return;
  try {
    (void)detail::stop_op_recording();
  } catch (const std::exception&) {  // running_ means it is running: cannot happen
  }
}

void OpProfile::start() {
  ZOFF_CHECK(!running_, "OpProfile::start: already running");
  detail::start_op_recording();
  running_ = true;
}

void OpProfile::stop(int64_t steps, double wall_seconds) {
  ZOFF_CHECK(running_, "OpProfile::stop: not running");
  const auto threads = detail::stop_op_recording();
  running_ = false;
  steps_ = std::max<int64_t>(steps, 1);
  wall_seconds_ = wall_seconds;
  std::map<std::pair<bool, std::string>, OpTime> by_name;
  for (size_t i = 0; i < threads.size(); ++i) fold_thread(threads[i], i > 0, &by_name);
  ops_.clear();
  for (auto& [name, t] : by_name) ops_.push_back(std::move(t));
  std::sort(ops_.begin(), ops_.end(),
            [](const OpTime& a, const OpTime& b) { return a.self_us > b.self_us; });
}

std::string OpProfile::table(size_t top) const {
  const double step_ms = wall_seconds_ * 1e3 / static_cast<double>(steps_);
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%lld steps, %.1f ms per step (wall)\n",
                static_cast<long long>(steps_), step_ms);
  os << line;
  std::snprintf(line, sizeof line, "%-44s %8s %12s %7s %13s\n", "op", "calls", "self ms/step",
                "% step", "total ms/step");
  os << line;
  double listed_ms = 0;
  bool other_threads = false;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const OpTime& t = ops_[i];
    if (i >= top && t.name.rfind("zoff::", 0) != 0) continue;
    const double self_ms = t.self_us / 1e3 / static_cast<double>(steps_);
    if (!t.other_thread) listed_ms += self_ms;  // other threads run beside the step
    other_threads = other_threads || t.other_thread;
    const std::string name = (t.other_thread ? kOtherThreadMark : "") + t.name;
    std::snprintf(line, sizeof line, "%-44.44s %8.1f %12.2f %6.1f%% %13.2f\n", name.c_str(),
                  static_cast<double>(t.calls) / static_cast<double>(steps_), self_ms,
                  100.0 * self_ms / step_ms, t.total_us / 1e3 / static_cast<double>(steps_));
    os << line;
  }
  std::snprintf(line, sizeof line, "%-44s %8s %12.2f %6.1f%%\n", "(not in the ops above)", "",
                step_ms - listed_ms, 100.0 * (step_ms - listed_ms) / step_ms);
  os << line;
  if (other_threads) {
    os << kOtherThreadMark
       << "ops on other threads (LibTorch's intra-op pool, Gloo's worker), beside this thread's "
          "step: not counted in the line above\n";
  }
  return os.str();
}

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Ops listed in the --profile table.
constexpr size_t kProfileTableRows = 40;
}  // namespace

std::string rank_profile_path(const std::string& path, int rank) {
  const std::filesystem::path p(path);
  ZOFF_CHECK_ARG(p.parent_path().string().find(kRankPlaceholder) == std::string::npos, "--profile ",
                 path, ": ", kRankPlaceholder, " may only be in the file name, not in a directory");
  std::string name = p.filename().string();
  const std::string number = std::to_string(rank);
  for (size_t at = name.find(kRankPlaceholder); at != std::string::npos;
       at = name.find(kRankPlaceholder, at + number.size())) {
    name.replace(at, std::strlen(kRankPlaceholder), number);
  }
  return (p.parent_path() / name).string();
}

StepSpanProfile::StepSpanProfile(const std::string& path, int64_t first, int64_t count, int rank)
    : path_(path.empty() ? path : rank_profile_path(path, rank)),
      first_(first),
      count_(count),
      write_(rank == 0 || path.find(kRankPlaceholder) != std::string::npos) {}

void StepSpanProfile::before_step(int64_t step) {
  if (path_.empty() || step != first_) return;
  started_ = now_seconds();
  profile_.start();
}

void StepSpanProfile::after_step(int64_t step) {
  if (path_.empty() || step != first_ + count_ - 1) return;
  profile_.stop(count_, now_seconds() - started_);
  if (write_) checkpoint::write_file_atomically(path_, profile_.table(kProfileTableRows));
}

}  // namespace zoff::train
