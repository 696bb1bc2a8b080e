// DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR as a pure function of the step.
#include "zoff/config/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "zoff/core/error.h"

namespace zoff::config {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Fraction of the warmup done at scheduler iteration i (< warmup steps).
double warmup_gamma(const SchedulerConfig& s, int64_t warmup, int64_t i) {
  if (s.warmup_type == "linear") return static_cast<double>(i) / static_cast<double>(warmup);
  return std::log(static_cast<double>(i + 1)) / std::log(static_cast<double>(warmup));
}

}  // namespace

double lr_at(const SchedulerConfig& s, double base_lr, int64_t step) {
  ZOFF_CHECK_ARG(step >= 0, "lr_at: step = ", step, ": must be >= 0");
  if (s.type.empty()) return base_lr;
  ZOFF_CHECK_ARG(s.type == "WarmupLR" || s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR",
                 "scheduler.type = \"", s.type, "\": unknown");
  ZOFF_CHECK_ARG(s.warmup_type == "log" || s.warmup_type == "linear",
                 "scheduler.params.warmup_type = \"", s.warmup_type, "\": must be log or linear");
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  const int64_t i = step - 1;  // DeepSpeed's last_batch_iteration while this step runs

  if (s.type == "WarmupCosineLR") {
    if (i < 0) return 0.0;
    const int64_t span = s.total_num_steps - warmup;
    ZOFF_CHECK_ARG(span > 0, "scheduler.params.total_num_steps = ", s.total_num_steps,
                   ": must be > warmup_num_steps (", warmup, ") for WarmupCosineLR");
    double ratio;
    if (i < warmup) {
      ratio = s.warmup_min_ratio + (1.0 - s.warmup_min_ratio) * warmup_gamma(s, warmup, i);
    } else {
      const double r = static_cast<double>(i - warmup + 1) / static_cast<double>(span);
      const double cosine = (1.0 + std::cos(kPi * r)) / 2.0;
      ratio = std::max(0.0, s.cos_min_ratio + (1.0 - s.cos_min_ratio) * cosine);
    }
    return base_lr * ratio;
  }

  const double delta = s.warmup_max_lr - s.warmup_min_lr;
  if (i < 0) return s.warmup_min_lr;
  double gamma = 1.0;
  if (i < warmup) {
    gamma = warmup_gamma(s, warmup, i);
  } else if (s.type == "WarmupDecayLR") {
    const double remaining = static_cast<double>(s.total_num_steps - i);
    const double span = std::max(1.0, static_cast<double>(s.total_num_steps - warmup));
    gamma = std::max(0.0, remaining / span);
  }
  return s.warmup_min_lr + delta * gamma;
}

}  // namespace zoff::config
