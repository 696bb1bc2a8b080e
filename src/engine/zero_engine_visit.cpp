// ZeroEngine::visit_parameters: every trainable parameter whole, one stage-3 unit at a time.
#include <torch/torch.h>

#include "zoff/engine/zero_engine.h"

namespace zoff::engine {

void ZeroEngine::visit_parameters(
    const std::function<void(const partition::ParamSlot&, const torch::Tensor&)>& fn) {
  synchronize();  // a delayed update still running lands first
  torch::NoGradGuard no_grad;
  const auto& units = layout_->units();
  for (size_t u = 0; u < units.size(); ++u) {
    auto visit_unit = [&] {
      for (size_t index : units[u].slots) {
        const auto& slot = layout_->slots()[index];
        const torch::Tensor& param = trainable_[slot.module_index];
        // On an accelerator: a host copy (visitors write files and read data_ptr()).
        fn(slot, param.is_cpu() ? param : param.to(torch::kCPU));
      }
    };
    if (UnitGatherer* gatherer = params_->gatherer()) {
      gatherer->with_whole(u, visit_unit);
    } else {
      visit_unit();
    }
  }
}

}  // namespace zoff::engine
