// StreamedWeights: parameters valued on entry to their unit and dropped on exit.
#include "zoff/unit/streamed_weights.h"

#include <algorithm>
#include <utility>

#include "zoff/core/error.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zoff::unit {

StreamedWeights::StreamedWeights(torch::nn::Module& root, ParamInit init)
    : root_(root), init_(std::move(init)) {
  ZOFF_CHECK(static_cast<bool>(init_), "StreamedWeights: no parameter values (init is empty)");
  for (const auto& item : root.named_parameters(/*recurse=*/true)) {
    if (!is_deferred(item.value())) continue;  // kept whole: frozen, tiny, or already valued
    // A tied tensor registered twice keeps its first name (the one its file stores).
    params_.emplace(item.value().unsafeGetTensorImpl(), Param{item.key(), item.value(), 0});
  }
  install_hooks(root, this);
}

StreamedWeights::~StreamedWeights() { remove_hooks(root_); }

std::vector<StreamedWeights::Param*> StreamedWeights::params_of(const torch::nn::Module& module) {
  std::vector<Param*> out;
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    auto it = params_.find(p.unsafeGetTensorImpl());
    if (it != params_.end() && std::find(out.begin(), out.end(), &it->second) == out.end()) {
      out.push_back(&it->second);
    }
  }
  return out;
}

void StreamedWeights::before_forward(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (Param* p : params_of(module)) {
    if (p->open++ > 0) continue;
    auto values = torch::empty(p->tensor.sizes(), p->tensor.options().requires_grad(false));
    init_(p->name, values);
    p->tensor.set_data(values);
    const int64_t bytes = static_cast<int64_t>(values.nbytes());
    live_ += bytes;
    read_ += bytes;
  }
  peak_ = std::max(peak_, live_);
}

void StreamedWeights::after_forward(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  bool dropped = false;
  for (Param* p : params_of(module)) {
    if (p->open == 0 || --p->open > 0) continue;
    live_ -= static_cast<int64_t>(p->tensor.nbytes());
    p->tensor.set_data(placeholder(p->tensor.sizes(), p->tensor.options()));
    dropped = true;
  }
#if defined(__GLIBC__)
  if (dropped) malloc_trim(0);  // give the unit's pages back now (see defer_parameters)
#endif
}

void StreamedWeights::before_backward(const torch::nn::Module& /*module*/) {
  throw Error("streamed weights are for inference: backward through a streamed unit");
}

}  // namespace zoff::unit
