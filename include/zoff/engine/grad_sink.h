// GradSink: where the reducer hands this rank's finished gradient ranges when the master store
// keeps the gradients itself (on disk, or streamed into the step) or steps while the last
// backward still runs (the overlapped disk step), so the gradient path never calls back into
// the engine.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "zoff/engine/grad_reducer.h"
#include "zoff/engine/master_store.h"
#include "zoff/placement/placement.h"

namespace zoff::engine {

class GradSink {
 public:
  // `store` outlives the sink; `world` ranks average the gradients.
  GradSink(MasterStore& store, const placement::Placement& placement, int world);

  // The reducer's shard_sink and on_shard_final, bound to this sink where the placement
  // needs them; then the reducer those options made (whose in-memory shard the overlapped
  // step averages range by range).
  void wire(GradReducerOptions* options);
  void set_reducer(GradReducer* reducer) { reducer_ = reducer; }

  // Before each micro-batch's backward; `boundary`: the accumulation's last, whose pieces
  // are final (averaged over ranks there, their squares counted).
  void begin_backward(bool boundary) { boundary_ = boundary; }
  // The overlapped step (placement.overlap_step): begins the store's step before the last
  // backward, at the step's lr, writing the compute copy to `out`.
  void begin_step(double lr, const StepOutput& out);
  bool overlapping() const { return overlapping_; }
  // step(): waits for the sub-groups the overlapped step has left.
  void finish_step();
  // A backward that failed while the step overlapped it: part of the tier holds this
  // step's values and part the last step's. Abandons the step; check() refuses from then on.
  void abort_backward();
  // Throws zoff::Error once the store's state can no longer be trusted.
  void check() const;

  // This rank's sum of the squares of the final gradients the store kept (its part of the
  // global norm); reset() after each step.
  double squares() const { return squares_; }
  void reset() { squares_ = 0; }

 private:
  void take(int64_t offset, const torch::Tensor& piece, bool first);
  void shard_final(int64_t offset, int64_t size);

  MasterStore& store_;
  placement::GradStore grads_;
  bool overlap_;
  int world_;
  GradReducer* reducer_ = nullptr;
  bool boundary_ = false;
  bool overlapping_ = false;
  double squares_ = 0;
  std::string damaged_;  // why the store's state can no longer be trusted
};

}  // namespace zoff::engine
