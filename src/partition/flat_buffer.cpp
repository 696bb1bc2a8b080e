// FlatBuffer: allocation, views, and rebinding module parameters/gradients into it.
#include "zoff/partition/flat_buffer.h"

#include "zoff/core/error.h"

namespace zoff::partition {

FlatBuffer::FlatBuffer(const FlatLayout& layout, torch::ScalarType dtype, torch::Device device)
    : layout_(&layout),
      flat_(torch::zeros({layout.padded_numel()},
                         torch::TensorOptions().dtype(dtype).device(device))) {}

torch::Tensor FlatBuffer::view(size_t slot) const {
  const auto& s = layout_->slots().at(slot);
  return flat_.narrow(0, s.offset, s.numel).view(s.shape);
}

void FlatBuffer::adopt_parameters(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const auto& slots = layout_->slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto& slot = slots[i];
    ZOFF_CHECK(slot.module_index < params.size(), "parameter list changed size");
    auto param = params[slot.module_index];
    ZOFF_CHECK(param.numel() == slot.numel, "parameter ", slot.name, " changed size");
    auto v = view(i);
    v.copy_(param.detach());
    param.set_data(v);
  }
}

void FlatBuffer::bind_as_grads(const std::vector<torch::Tensor>& params) {
  const auto& slots = layout_->slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    auto param = params[slots[i].module_index];
    param.mutable_grad() = view(i);
  }
}

}  // namespace zoff::partition
