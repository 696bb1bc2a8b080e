// DeviceTransfer: synchronous host copies, and side-stream copies for an accelerator.
#include "zoff/core/device_transfer.h"

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "zoff/core/error.h"

namespace zoff {
namespace {

// Compute on the CPU: the copy is the transfer.
class HostTransfer final : public DeviceTransfer {
 public:
  void copy(const torch::Tensor& dst, const torch::Tensor& src) override { dst.copy_(src); }
  void wait() override {}
  torch::TensorOptions host_options(torch::ScalarType dtype) const override {
    return torch::TensorOptions().dtype(dtype);
  }
};

// An accelerator with streams (through c10's device-generic interface, so nothing here
// needs CUDA's headers): copies run on a side stream, so the copy engine moves a gradient
// while the compute stream goes on with backward.
class StreamTransfer final : public DeviceTransfer {
 public:
  explicit StreamTransfer(torch::Device device)
      : device_(device),
        impl_(c10::impl::getDeviceGuardImpl(device.type())),
        side_(impl_->getStreamFromGlobalPool(device, /*isHighPriority=*/false)) {}

  void copy(const torch::Tensor& dst, const torch::Tensor& src) override {
    const torch::Tensor& on_device = dst.device().is_cpu() ? src : dst;
    ZOFF_CHECK(on_device.device() == device_, "DeviceTransfer: a copy between ", src.device(),
               " and ", dst.device(), " on the ", device_, " transfer");
    // The side stream starts the copy only after what the compute stream has queued so
    // far (the kernel that produced a gradient, or the last use of a parameter).
    c10::Event ready(device_.type());
    ready.record(impl_->getStream(device_));
    ready.block(side_);
    {
      c10::StreamGuard guard(side_);
      dst.copy_(src, /*non_blocking=*/true);
    }
    // The caching allocator may hand the device tensor's memory to the compute stream
    // once its owner frees it; recording the side stream holds it until the copy ran.
    on_device.record_stream(side_);
    pending_ = true;
  }

  void wait() override {
    if (!pending_) return;
    c10::Event done(device_.type());
    done.record(side_);
    done.synchronize();
    pending_ = false;
  }

  torch::TensorOptions host_options(torch::ScalarType dtype) const override {
    return torch::TensorOptions().dtype(dtype).pinned_memory(true);
  }

 private:
  torch::Device device_;
  const c10::impl::DeviceGuardImplInterface* impl_;
  c10::Stream side_;
  bool pending_ = false;
};

}  // namespace

std::unique_ptr<DeviceTransfer> make_device_transfer(torch::Device compute) {
  if (compute.is_cpu()) return std::make_unique<HostTransfer>();
  ZOFF_CHECK_ARG(c10::impl::hasDeviceGuardImpl(compute.type()), "device ", compute,
                 ": LibTorch's library for it is not loaded (for CUDA: zoff::load_torch_cuda())");
  return std::make_unique<StreamTransfer>(compute);
}

}  // namespace zoff
