// ComputeParams: what stages 0-2 and stage 3 share (the step's output, update, publish, rebuild).
#include "zoff/engine/compute_params.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>

namespace zoff::engine {

std::unique_ptr<ComputeParams> make_whole_compute_params(ComputeParamsSetup setup);
std::unique_ptr<ComputeParams> make_unit_compute_params(ComputeParamsSetup setup);

std::unique_ptr<ComputeParams> make_compute_params(ComputeParamsSetup setup) {
  if (setup.placement.stage == 3) return make_unit_compute_params(std::move(setup));
  return make_whole_compute_params(std::move(setup));
}

StepOutput ComputeParams::step_output(const torch::Tensor& target) const {
  StepOutput out;
  if (!fp32()) {
    out.copy_out = s_.dtype == torch::kBFloat16 ? optim::CopyOut::kBf16 : optim::CopyOut::kFp16;
  }
  if (!target.defined()) return out;
  if (!fp32()) {
    out.out16 = reinterpret_cast<uint16_t*>(target.data_ptr());
  } else if (!master_.defined()) {
    out.out32 = target.data_ptr<float>();  // a disk master: its new values, once more in memory
  }
  return out;
}

void ComputeParams::update(MasterStore& store, const float* grads, double lr, StepTimes* times) {
  const auto start = std::chrono::steady_clock::now();
  {
    RECORD_USER_SCOPE("zoff::optimizer_step");
    store.step(grads, lr, step_output());
    times->optimizer_ms += ms_since(start);
  }
  RECORD_USER_SCOPE("zoff::publish_params");  // stages 1-2: the all-gather
  publish(times);
}

void ComputeParams::publish(StepTimes* times) {
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  publish_master();
  times->allgather_ms += ms_since(start);
}

void ComputeParams::rebuild(MasterStore& store) {
  torch::NoGradGuard no_grad;
  if (master_.defined()) {
    // Without a 16-bit shard the publish rounds from the master itself.
    if (!fp32() && output_.defined()) output_.copy_(master_);
    return;
  }
  // A split master in memory: its copy half is the compute copy, written with the master.
  if (store.tiered() == nullptr) return;
  // From a disk store, sub-group by sub-group (a multiple of 2048 elements: 16-bit chunks
  // of a parameter region start aligned).
  const int64_t chunk = store.tiered()->sub_group_elems();
  const int64_t size = s_.layout->shard_size();
  auto buf = torch::empty({chunk}, torch::kFloat32);
  for (int64_t at = 0; at < size; at += chunk) {
    const int64_t n = std::min(chunk, size - at);
    store.read_master(static_cast<size_t>(at), static_cast<size_t>(n), buf.data_ptr<float>());
    write_rebuilt(at, buf.narrow(0, 0, n));
  }
}

void ComputeParams::write_rebuilt(int64_t at, const torch::Tensor& values) {
  shard_space_.narrow(0, at, values.numel()).copy_(values);
}

void ComputeParams::make_shard_space(bool none) {
  // On an accelerator the shard the optimizer writes stays in host memory: the publish
  // gathers it there and copies the whole parameters to the device once.
  const torch::Device shard_home = s_.on_device ? torch::Device(torch::kCPU) : s_.device;
  if (master_.defined() && fp32() && master_.device() == shard_home) {
    // The optimizer updates the shard the model's copy comes from (at stage 3 the pieces
    // the model gathers: placement.master_is_params).
    shard_space_ = master_;
  } else if (!none) {
    shard_space_ = torch::zeros(
        {s_.layout->shard_size()},
        s_.on_device ? s_.host_options : torch::TensorOptions().dtype(s_.dtype).device(s_.device));
  }
}

void ComputeParams::copy_master_to_shard() {
  if (fp32() && master_.defined() && !shard_space_.is_same(master_)) {
    shard_space_.copy_(master_, /*non_blocking=*/true);
  }
}

}  // namespace zoff::engine
