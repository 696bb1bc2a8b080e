// defer_parameters: shape-only placeholders for parameters whose values the engine makes.
#include "zoff/unit/deferred_init.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zoff::unit {

void defer_parameters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters(/*recurse=*/true)) {
    if (!p.requires_grad() || p.numel() <= 1 || is_deferred(p)) continue;
    // One element expanded to the shape: shape, dtype, device and requires_grad stay, so
    // the engine plans units and layouts from it as from the real tensor.
    p.set_data(placeholder(p.sizes(), p.options()));
  }
#if defined(__GLIBC__)
  // The values freed above sit in malloc's heap (glibc raises its mmap threshold after the
  // first large free, so later blocks come from the heap), between small live chunks: they
  // are not given back on their own, and a model built block by block would end up holding
  // RSS for the whole of it. Hand the free pages back now, so the peak stays one block.
  malloc_trim(0);
#endif
}

torch::Tensor placeholder(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  return torch::zeros({}, options).expand(sizes);
}

bool is_deferred(const torch::Tensor& t) {
  if (!t.defined() || t.numel() <= 1 || !t.has_storage()) return false;
  const auto needed = static_cast<size_t>(t.numel()) * t.element_size();
  return t.storage().nbytes() < needed;
}

}  // namespace zoff::unit
