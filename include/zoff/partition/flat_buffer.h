// One contiguous tensor holding every parameter (or gradient) of a module, with views into it.
#pragma once

#include <torch/torch.h>

#include "zoff/partition/flat_layout.h"

namespace zoff::partition {

// A zero-initialised flat tensor of padded_numel elements of one dtype on one
// device, and per-parameter views shaped like the parameters.
class FlatBuffer {
 public:
  FlatBuffer(const FlatLayout& layout, torch::ScalarType dtype, torch::Device device)
      : FlatBuffer(layout.slots(), layout.padded_numel(), dtype, device) {}
  // `slots` must outlive the buffer (a layout's own vector).
  FlatBuffer(const std::vector<ParamSlot>& slots, int64_t padded_numel, torch::ScalarType dtype,
             torch::Device device);
  // Over memory the caller provides (e.g. Comm::shared_tensor): a contiguous 1-D tensor of
  // padded_numel elements, whose values are kept.
  FlatBuffer(const std::vector<ParamSlot>& slots, torch::Tensor storage);

  torch::Tensor& flat() { return flat_; }
  const torch::Tensor& flat() const { return flat_; }
  // The view of slot i, shaped like the parameter.
  torch::Tensor view(size_t slot) const;
  // The elements of a shard or any range, as a 1-D view.
  torch::Tensor range(int64_t offset, int64_t size) const { return flat_.narrow(0, offset, size); }
  torch::Tensor range(const Shard& s) const { return range(s.offset, s.size); }
  size_t bytes() const { return static_cast<size_t>(flat_.numel()) * flat_.element_size(); }

  // Copies each parameter's values into the buffer, then makes the parameter a view into
  // it (Tensor::set_data keeps the autograd identity, so optimizers and hooks registered
  // on the parameter still see it).
  void adopt_parameters(const std::vector<torch::Tensor>& params_in_module_order);
  // Makes each parameter a view into the buffer without copying values (the caller has
  // written them), likewise keeping autograd identity.
  void bind_parameters(const std::vector<torch::Tensor>& params_in_module_order);
  // Makes each parameter's .grad a view into this buffer, so autograd accumulates into
  // it in place.
  void bind_as_grads(const std::vector<torch::Tensor>& params_in_module_order);

 private:
  const std::vector<ParamSlot>* slots_;
  torch::Tensor flat_;
};

}  // namespace zoff::partition
