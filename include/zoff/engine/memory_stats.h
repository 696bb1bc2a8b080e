// Bytes of model state one rank holds, per category and per tier.
#pragma once

#include <cstddef>

namespace zoff::engine {

// One tier's model-state bytes. params: the parameters the model computes with; grads:
// gradients kept between backward and step (the full buffer or this rank's shard);
// master: an fp32 master copy when compute params are 16-bit; optim: optimizer states
// (m, v, ...); buffers: communication buckets and staging.
struct TierBytes {
  size_t params = 0;
  size_t grads = 0;
  size_t master = 0;
  size_t optim = 0;
  size_t buffers = 0;
  size_t total() const { return params + grads + master + optim + buffers; }
};

struct MemoryStats {
  TierBytes compute;  // the compute device
  TierBytes offload;  // the offload tier (host memory), empty without offload
  // Bytes on disk in the NVMe tier (offload_optimizer/offload_param device "nvme"): not
  // memory. The host buffers the NVMe step streams through count in offload.buffers.
  TierBytes nvme;
  // Stage 3: bytes of whole (gathered) units now, included in compute.params, and the most
  // ever whole at once of units that are not persistent (bounded by
  // stage3_max_live_parameters plus one unit).
  size_t live_unit_bytes = 0;
  size_t peak_live_bytes = 0;
  // Stages 1-2 with host_shared_params: the bytes of the one copy of the compute parameters
  // that every rank of the host maps; compute.params counts this rank's share of it (the
  // bytes divided by the world size), so that the ranks' figures add up to the host's.
  size_t host_shared_params = 0;
  // Not model state: the bytes the step's forward kept alive for backward (the largest
  // over its micro-batches), measured from the CPU allocator (activation_meter.h).
  size_t activations = 0;
  // The summary the logs report: params, grads, optim = master + optimizer states.
  size_t params() const { return compute.params + offload.params; }
  size_t grads() const { return compute.grads + offload.grads; }
  // Summaries of memory: the NVMe tier's disk bytes are not in them.
  size_t optim() const { return compute.master + compute.optim + offload.master + offload.optim; }
  size_t buffers() const { return compute.buffers + offload.buffers; }
};

}  // namespace zoff::engine
