// GradSink: reduced gradient ranges into the master store, and the disk step overlapped with
// backward.
#include "zoff/engine/grad_sink.h"

#include "zoff/core/error.h"

namespace zoff::engine {

GradSink::GradSink(MasterStore& store, const placement::Placement& placement, int world)
    : store_(store), grads_(placement.grads), overlap_(placement.overlap_step), world_(world) {}

void GradSink::wire(GradReducerOptions* options) {
  if (grads_ != placement::GradStore::kMemory) {
    options->shard_sink = [this](int64_t offset, const torch::Tensor& piece, bool first) {
      take(offset, piece, first);
    };
  }
  if (overlap_) {
    options->on_shard_final = [this](int64_t offset, int64_t size) { shard_final(offset, size); };
  }
}

// A reduced bucket's shard range, into the store: the last micro-batch also averages over
// ranks there (as step() would in memory) and adds to this rank's squares.
void GradSink::take(int64_t offset, const torch::Tensor& piece, bool first) {
  const int divide_by = boundary_ ? world_ : 1;
  const double squares = store_.take_grads(static_cast<size_t>(offset), piece.data_ptr<float>(),
                                           static_cast<size_t>(piece.numel()), first, divide_by);
  if (boundary_) squares_ += squares;
}

// Note: the overlapped step. The optimizer's worker thread starts the step before the last
// backward of the accumulation; the reducer reports each bucket's shard range as soon as
// its sum is final (shard_final), the range is averaged over ranks there (the same
// division step() would do, element by element), and every sub-group whose elements are
// all final is read, updated and written while backward computes the rest. step() then
// measures the norm (read only) and waits for the sub-groups left. Exact: same kernels,
// same values, same lr (the schedule's value for this step is known before backward).
void GradSink::begin_step(double lr, const StepOutput& out) {
  const auto grads = reducer_->reduced_grads();  // undefined: the gradients are in the store
  store_.begin_step(grads.defined() ? grads.data_ptr<float>() : nullptr, lr, out);
  overlapping_ = true;
}

void GradSink::shard_final(int64_t offset, int64_t size) {
  // Streamed gradients: take_grads submitted each complete sub-group itself.
  if (!overlapping_ || size == 0 || grads_ == placement::GradStore::kStreamed) return;
  torch::NoGradGuard no_grad;
  if (world_ > 1 && grads_ == placement::GradStore::kMemory) {  // kept: divided as written
    reducer_->reduced_grads().narrow(0, offset, size).div_(static_cast<double>(world_));
  }
  store_.grads_final(static_cast<size_t>(offset), static_cast<size_t>(size));
}

void GradSink::finish_step() {
  overlapping_ = false;
  store_.finish_step();  // began with backward, at the same lr
}

void GradSink::abort_backward() {
  if (!overlapping_) return;
  overlapping_ = false;
  try {
    store_.abandon_step();
  } catch (...) {
  }
  damaged_ =
      "the nvme tier holds a half-applied step (a backward failed while the step overlapped "
      "it): resume from the last checkpoint";
}

void GradSink::check() const { ZOFF_CHECK(damaged_.empty(), damaged_); }

}  // namespace zoff::engine
