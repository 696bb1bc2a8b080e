// Learning rate as a function of the optimizer step, with DeepSpeed's scheduler semantics.
#pragma once

#include <cstdint>

#include "zoff/config/config.h"

namespace zoff::config {

// lr for optimizer step `step` (0-based: the first optimizer step uses step 0), given the
// scheduler config and the optimizer's base lr (used when there is no scheduler, and as the
// scale of WarmupCosineLR's ratios).
//
// Step indexing, matching DeepSpeed exactly: DeepSpeed builds the scheduler with
// last_batch_iteration = -1 (the constructor sets the optimizer's lr from that state) and
// calls scheduler.step() after every *applied* optimizer step (an fp16 overflow skip does
// not advance it). So optimizer step k (k applied steps done before it) runs with the
// scheduler at last_batch_iteration = k - 1:
//   - step 0 runs with the constructor's lr: warmup_min_lr for WarmupLR/WarmupDecayLR, and
//     exactly 0 for WarmupCosineLR (DeepSpeed's get_lr returns 0.0 before the first step()).
//   - step k >= 1 uses i = k - 1 in the formulas below (so steps 0 and 1 both run at
//     warmup_min_lr / warmup_min_ratio).
// With W = max(2, warmup_num_steps), T = total_num_steps:
//   warmup gamma(i) = log(i + 1) / log(W)  (log)  or  i / W  (linear), for i < W
//   WarmupLR:        min_lr + (max_lr - min_lr) * (i < W ? gamma(i) : 1)
//   WarmupDecayLR:   as WarmupLR during warmup, then
//                    min_lr + (max_lr - min_lr) * max(0, (T - i) / max(1, T - W))
//   WarmupCosineLR:  base_lr * ratio, ratio = warmup_min_ratio + (1 - warmup_min_ratio) *
//                    gamma(i) during warmup, then with r = (i - W + 1) / (T - W):
//                    max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi r)) / 2).
//                    Like DeepSpeed, r is not clamped: past T the cosine rises again.
// Callers pass the count of applied optimizer steps; negative steps are a UsageError.
double lr_at(const SchedulerConfig& sched, double base_lr, int64_t step);

}  // namespace zoff::config
