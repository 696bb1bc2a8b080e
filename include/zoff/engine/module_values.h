// What the engine reads from the module it is handed: its device, and each unit's starting values.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "zoff/engine/unit_plan.h"
#include "zoff/partition/model_layout.h"
#include "zoff/unit/deferred_init.h"

namespace zoff::engine {

// The one device every parameter and buffer of `plan` is on (the CPU when every trainable
// parameter is a deferred placeholder); a module spread over several throws
// zoff::UsageError naming the first tensor elsewhere.
torch::Device module_device(const UnitPlan& plan);

// Deferred trainable parameters need `param_init` (has_init); frozen parameters and buffers
// are kept whole on every rank from the module's own values, so they cannot be deferred:
// zoff::UsageError naming the tensor.
void check_deferred(const UnitPlan& plan, bool has_init);

// True when some trainable parameter of `plan` is a deferred placeholder.
bool any_deferred(const UnitPlan& plan);

// Unit `u`'s values from the module's trainable parameters (a deferred one from
// `param_init`): fp32, in host memory, padded, in the unit's layout (unit.padded_numel
// elements).
torch::Tensor unit_values_fp32(const partition::ModelLayout& layout, size_t u, const UnitPlan& plan,
                               const unit::ParamInit& param_init);

}  // namespace zoff::engine
