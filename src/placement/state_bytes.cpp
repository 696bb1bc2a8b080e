// state_bytes: each model state's bytes from where a Placement puts it.
#include "zoff/placement/state_bytes.h"

namespace zoff::placement {

StateShape state_shape(const std::vector<int64_t>& unit_elems, int world, int stage,
                       int64_t states) {
  StateShape shape;
  shape.states = states;
  const int64_t w = world;
  const int64_t pad_to = stage >= 1 ? w : 1;
  int64_t whole = 0;
  for (int64_t u : unit_elems) whole += (u + pad_to - 1) / pad_to * pad_to;
  shape.params = (whole + w - 1) / w * w;
  shape.shard = stage == 0 ? shape.params : shape.params / w;
  return shape;
}

StateBytes state_bytes(const Placement& p, const StateShape& shape) {
  StateBytes b;
  const auto compute = static_cast<int64_t>(element_bytes(p.precision));
  const int64_t shard = shape.shard;
  // Parameters: whole at stages 0-2; stage 3's pieces in memory or in the disk store (with
  // fp32 compute and the master beside them, the pieces are the master itself).
  if (p.stage < 3) {
    b.memory_params = shape.params * compute;
  } else if (p.params_on_disk()) {
    b.disk_params = shard * compute;
  } else {
    b.memory_params = shard * compute;
  }
  // Gradients accumulate in fp32: whole until the boundary at stages 0-1, the shard at 2-3.
  if (p.stage < 2) {
    b.memory_grads = shape.params * 4;
    // Stage 1 on an accelerator: the reduce-scatter's fp32 shard is a host copy of its own.
    if (p.stage == 1 && p.compute_on_device) b.memory_grads += shard * 4;
  } else if (p.grads == GradStore::kMemory) {
    b.memory_grads = shard * 4;
  } else if (p.grads == GradStore::kDisk) {
    b.disk_grads = shard * 4;
  }
  const int64_t stored = static_cast<int64_t>(optim::stored_element_bytes(p.states));
  const int64_t scales =
      p.states == optim::StateDtype::kInt8
          ? static_cast<int64_t>(optim::state_blocks(static_cast<size_t>(shard))) * 4
          : 0;
  if (p.optimizer_on_disk()) {
    b.disk_master = shard * (p.split_master ? 2 : 4);  // split: the 16-bit extension only
    b.disk_states = shape.states * shard * stored;
    b.memory_states = shape.states * scales;
  } else {
    b.memory_master = p.master_is_params ? 0 : shard * (p.split_master ? 2 : 4);
    b.memory_states = shape.states * (shard * stored + scales);
  }
  return b;
}

}  // namespace zoff::placement
