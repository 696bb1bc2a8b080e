// The module's device and the units' starting values, read from the module handed to the engine.
#include "zoff/engine/module_values.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "zoff/core/error.h"

namespace zoff::engine {

torch::Device module_device(const UnitPlan& plan) {
  std::optional<std::pair<std::string, torch::Device>> first;
  for (const auto* group : {&plan.trainable, &plan.frozen, &plan.buffers}) {
    for (const auto& [name, t] : *group) {
      if (unit::is_deferred(t)) continue;  // a placeholder has no storage anywhere
      if (!first) first.emplace(name, t.device());
      ZOFF_CHECK_ARG(t.device() == first->second, "engine: ", name, " is on ", t.device(), " but ",
                     first->first, " on ", first->second, ": the module must be on one device");
    }
  }
  return first ? first->second : torch::Device(torch::kCPU);
}

void check_deferred(const UnitPlan& plan, bool has_init) {
  for (const auto& [name, t] : plan.trainable) {
    ZOFF_CHECK_ARG(!unit::is_deferred(t) || has_init, "engine: parameter ", name,
                   " has no values (deferred by unit::defer_parameters) and "
                   "EngineOptions::param_init is not set");
  }
  for (const auto* group : {&plan.frozen, &plan.buffers}) {
    for (const auto& [name, t] : *group) {
      ZOFF_CHECK_ARG(!unit::is_deferred(t), "engine: ", name,
                     " is frozen (or a buffer) and deferred: only trainable parameters can "
                     "be deferred; build it with its values");
    }
  }
}

bool any_deferred(const UnitPlan& plan) {
  return std::any_of(plan.trainable.begin(), plan.trainable.end(),
                     [](const auto& item) { return unit::is_deferred(item.second); });
}

torch::Tensor unit_values_fp32(const partition::ModelLayout& layout, size_t u, const UnitPlan& plan,
                               const unit::ParamInit& param_init) {
  const auto& unit = layout.units()[u];
  // In host memory whatever the compute device: the broadcast and the master are there.
  auto values = torch::zeros({unit.padded_numel}, torch::kFloat32);
  for (size_t s : unit.slots) {
    const auto& slot = layout.slots()[s];
    auto dst = values.narrow(0, slot.offset - unit.offset, slot.numel);
    const auto& [name, param] = plan.trainable[slot.module_index];
    if (unit::is_deferred(param)) {
      param_init(name, dst.view(param.sizes()));
    } else {
      dst.copy_(param.detach().reshape({-1}));
    }
  }
  return values;
}

}  // namespace zoff::engine
