// Wall-clock time of one optimizer step's phases on this rank (DeepSpeed's wall_clock_breakdown).
#pragma once

#include <chrono>

namespace zoff::engine {

// Milliseconds, measured by the engine with a steady clock on every step (a few clock reads:
// no synchronisation is added, so the figures are what the step costs as it runs). The parts
// of a phase are included in it; what is left is the phase's own work.
struct StepTimes {
  // engine.backward, summed over the step's micro-batches: autograd (with the gradient
  // reduction it overlaps) and the wait for the last buckets after it.
  double backward_ms = 0.0;
  // Of backward_ms: waiting after autograd for the gradient collectives still in flight.
  double backward_reduce_ms = 0.0;
  // engine.step: the parts below, plus fp16's overflow check and unscale.
  double step_ms = 0.0;
  // The average over ranks (fused with the norm's squares), the global norm (a gather of one
  // number per rank) and clipping.
  double grad_norm_ms = 0.0;
  double optimizer_ms = 0.0;  // the update of this rank's shard (its launch, with delayed updates)
  // Publishing the new parameters: stages 1-2's all-gather, or with one copy per host
  // (host_shared_params) the writes of this rank's pieces into it between two barriers
  // (with 16-bit parameters the fused update writes them: only the barriers count here).
  double allgather_ms = 0.0;
  // Waits for the disk during the step (StepMeter): forward and backward for parameter
  // pieces, backward for the streamed-gradient window, the disk step's worker for its reads
  // and write-backs (on its own thread: overlapped with backward until the last sub-group).
  double io_params_ms = 0.0;
  double io_grad_window_ms = 0.0;
  double io_optimizer_ms = 0.0;
};

// Milliseconds from `start` to now on the steady clock the phases are read with.
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace zoff::engine
