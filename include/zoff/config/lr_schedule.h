// Learning rate as a function of the optimizer step, with DeepSpeed's scheduler semantics.
#pragma once

#include <cstdint>

#include "zoff/config/config.h"

namespace zoff::config {

// lr for optimizer step `step` (0-based: the first optimizer step uses step 0), given the
// scheduler config and the optimizer's base lr (used when there is no scheduler).
double lr_at(const SchedulerConfig& sched, double base_lr, int64_t step);

}  // namespace zoff::config
