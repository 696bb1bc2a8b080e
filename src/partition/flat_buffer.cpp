// FlatBuffer: allocation, views, and rebinding module parameters/gradients into it.
#include "zoff/partition/flat_buffer.h"

#include "zoff/core/error.h"

namespace zoff::partition {

FlatBuffer::FlatBuffer(const std::vector<ParamSlot>& slots, int64_t padded_numel,
                       torch::ScalarType dtype, torch::Device device)
    : slots_(&slots),
      flat_(torch::zeros({padded_numel}, torch::TensorOptions().dtype(dtype).device(device))) {}

FlatBuffer::FlatBuffer(const std::vector<ParamSlot>& slots, torch::Tensor storage)
    : slots_(&slots), flat_(std::move(storage)) {
  ZOFF_CHECK_ARG(flat_.defined() && flat_.dim() == 1 && flat_.is_contiguous(),
                 "FlatBuffer: the storage must be a contiguous 1-D tensor");
  for (const auto& s : slots) {
    ZOFF_CHECK_ARG(s.offset + s.numel <= flat_.numel(), "FlatBuffer: parameter ", s.name,
                   " ends at ", s.offset + s.numel, ", past the storage's ", flat_.numel(),
                   " elements");
  }
}

torch::Tensor FlatBuffer::view(size_t slot) const {
  const auto& s = slots_->at(slot);
  return flat_.narrow(0, s.offset, s.numel).view(s.shape);
}

void FlatBuffer::adopt_parameters(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const auto& slots = *slots_;
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

void FlatBuffer::bind_parameters(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const auto& slots = *slots_;
  for (size_t i = 0; i < slots.size(); ++i) {
    ZOFF_CHECK(slots[i].module_index < params.size(), "parameter list changed size");
    params[slots[i].module_index].set_data(view(i));
  }
}

void FlatBuffer::bind_as_grads(const std::vector<torch::Tensor>& params) {
  const auto& slots = *slots_;
  for (size_t i = 0; i < slots.size(); ++i) {
    auto param = params[slots[i].module_index];
    param.mutable_grad() = view(i);
  }
}

}  // namespace zoff::partition
