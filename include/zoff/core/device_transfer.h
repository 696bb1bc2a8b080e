// Copies between host memory and a compute device, ordered after the device's queued work.
#pragma once

#include <torch/torch.h>

#include <memory>

namespace zoff {

// The GPU path's data movement in one place (ZeRO-Offload's gradient and parameter
// traffic): gradients leave the device for host staging while backward goes on, updated
// parameters come back after the CPU step. One implementation for the host (plain copies:
// what every CPU run and test exercises) and one for any accelerator LibTorch has a stream
// interface for (CUDA): copies on a side stream of their own, after an event on the
// compute stream, the device tensor held for that stream until the copy is done. Nothing
// in it names CUDA: it works once LibTorch's CUDA library is loaded (torch_cuda.h).
// One thread at a time (the engine's, or autograd's while backward runs).
class DeviceTransfer {
 public:
  virtual ~DeviceTransfer() = default;
  // Queues dst.copy_(src), src and dst of the same numel and dtype, one on the compute
  // device and one in host memory, after the compute queued so far on the calling thread's
  // current stream. The caller may free or reuse the device-side tensor at once (its
  // memory is held until the copy ran); the host side must stay until wait().
  virtual void copy(const torch::Tensor& dst, const torch::Tensor& src) = 0;
  // Blocks until every copy queued so far has landed: host buffers can be read, and
  // device buffers are ready for whatever the compute stream queues next.
  virtual void wait() = 0;
  // Options of host buffers the device copies from and to (page-locked for a GPU: only
  // those copy asynchronously).
  virtual torch::TensorOptions host_options(torch::ScalarType dtype) const = 0;
};

// The transfer for `compute` (the host's for the CPU). Throws zoff::UsageError naming the
// device when LibTorch has no stream interface for its type (CUDA before torch_cuda is
// loaded, say).
std::unique_ptr<DeviceTransfer> make_device_transfer(torch::Device compute);

}  // namespace zoff
