// HostSplitMaster: the split master's two halves in host memory, for the host MasterStore.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "zoff/offload/tier.h"
#include "zoff/optim/copy_out_pieces.h"
#include "zoff/optim/shard_optimizer.h"

namespace zoff::engine {

// `numel` fp32 masters stored as optim/split_master.h says: the 16-bit extensions in a
// region of a host tier (2 bytes per element) and the bf16 copy in the compute parameters
// the step writes anyway, bound after construction: contiguous (this rank's shard of
// them) or scattered over its pieces of one copy per host. No fp32 master is kept; each
// step joins, updates and splits the masters in L2-sized chunks (SpanOptimizer).
class HostSplitMaster {
 public:
  HostSplitMaster(offload::Tier& tier, size_t numel);

  // The copy half: numel contiguous bf16 elements in host memory, or pieces of numel.
  // Throws zoff::Error on another shape or dtype.
  void bind(const torch::Tensor& copy);
  void bind(const optim::CopyOutPieces& pieces);

  // Setup: the extensions of masters [offset, offset + n) from `values`, which must be
  // settled (optim::split_master_settle; zoff::Error naming the first that is not); their
  // copies are the compute parameters' rounding, written by whoever fills those.
  void fill(size_t offset, const float* values, size_t n);
  // The fp32 masters [offset, offset + n) into dst, joined.
  void read(size_t offset, size_t n, float* dst) const;
  // Masters [offset, offset + n) from src (settled as stored) into both halves.
  void write(size_t offset, size_t n, const float* src);
  // One step of `optimizer` (the fused backend) over all masters; returns the odd ties
  // it settled. `out16`, where the caller expects the new copy: null, or the bound copy
  // (zoff::Error otherwise: the step writes only there).
  size_t step(optim::ShardOptimizer& optimizer, const float* grads, double lr,
              const uint16_t* out16 = nullptr);

  size_t numel() const { return numel_; }

 private:
  // fn(at, k, copy of element at) over the runs of [offset, offset + n) of the bound copy.
  template <class Fn>
  void copy_runs(size_t offset, size_t n, const Fn& fn) const;
  void check_bound() const;

  size_t numel_;
  std::unique_ptr<offload::TierRegion> region_;  // the extensions
  uint16_t* ext_ = nullptr;
  uint16_t* copy_ = nullptr;     // contiguous copy, or
  optim::CopyOutPieces pieces_;  // the scattered one
  bool scattered_ = false;
};

}  // namespace zoff::engine
