// HostSplitMaster: extensions in a host region, the copy in the compute parameters.
#include "host_split_master.h"

#include "zoff/core/error.h"
#include "zoff/optim/split_master.h"

namespace zoff::engine {

HostSplitMaster::HostSplitMaster(offload::Tier& tier, size_t numel) : numel_(numel) {
  ZOFF_CHECK(tier.is_host(), "split master: tier ", tier.name(), " is not host memory");
  region_ = tier.allocate("master.extension", numel * sizeof(uint16_t));
  ext_ = static_cast<uint16_t*>(region_->host_data());
}

void HostSplitMaster::bind(const torch::Tensor& copy) {
  ZOFF_CHECK(copy.defined() && copy.scalar_type() == torch::kBFloat16 && copy.is_cpu() &&
                 copy.is_contiguous() && static_cast<size_t>(copy.numel()) == numel_,
             "host master store: the split master's copy must be ", numel_,
             " contiguous bf16 elements in host memory");
  copy_ = reinterpret_cast<uint16_t*>(copy.data_ptr());
  scattered_ = false;
}

void HostSplitMaster::bind(const optim::CopyOutPieces& pieces) {
  ZOFF_CHECK(pieces.numel() == numel_, "host master store: the split master's copy pieces hold ",
             pieces.numel(), " elements, not ", numel_);
  pieces_ = pieces;
  copy_ = nullptr;
  scattered_ = true;
}

void HostSplitMaster::check_bound() const {
  ZOFF_CHECK(numel_ == 0 || scattered_ || copy_ != nullptr,
             "host master store: the split master's copy was never bound");
}

template <class Fn>
void HostSplitMaster::copy_runs(size_t offset, size_t n, const Fn& fn) const {
  check_bound();
  ZOFF_CHECK(offset <= numel_ && n <= numel_ - offset, "host master store: masters [", offset, ", ",
             offset + n, ") past its ", numel_);
  if (n == 0) return;
  if (scattered_) return pieces_.for_each_run(offset, n, fn);
  fn(offset, n, copy_ + offset);
}

void HostSplitMaster::fill(size_t offset, const float* values, size_t n) {
  ZOFF_CHECK(offset <= numel_ && n <= numel_ - offset, "host master store: fill [", offset, ", ",
             offset + n, ") past its ", numel_);
  optim::split_master_extensions(values, n, ext_ + offset, offset);
}

void HostSplitMaster::read(size_t offset, size_t n, float* dst) const {
  copy_runs(offset, n, [&](size_t at, size_t k, uint16_t* copy) {
    optim::split_master_decode(copy, ext_ + at, k, dst + (at - offset));
  });
}

void HostSplitMaster::write(size_t offset, size_t n, const float* src) {
  copy_runs(offset, n, [&](size_t at, size_t k, uint16_t* copy) {
    optim::split_master_encode_from(src + (at - offset), k, copy, ext_ + at);
  });
}

size_t HostSplitMaster::step(optim::ShardOptimizer& optimizer, const float* grads, double lr,
                             const uint16_t* out16) {
  check_bound();
  ZOFF_CHECK(out16 == nullptr || out16 == copy_,
             "host master store: a step's 16-bit output is not the split master's copy");
  if (scattered_) return optimizer.step_split_scattered(pieces_, ext_, grads, lr);
  return optimizer.step_split(copy_, ext_, grads, lr);
}

}  // namespace zoff::engine
