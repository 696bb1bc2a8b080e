// One rank's model-state bytes as a Placement puts them: what the engine allocates, what the
// planner and the estimator count.
#pragma once

#include <cstdint>
#include <vector>

#include "zoff/placement/placement.h"

namespace zoff::placement {

// The element counts the bytes follow from.
struct StateShape {
  // Trainable elements, whole and padded as the flat layout holds them (stages 0-2's
  // parameters and stages 0-1's fp32 gradients have this many elements).
  int64_t params = 0;
  // This rank's optimizer elements: its shard space at stages 1-3 (every unit's piece,
  // padded), the whole padded buffer at stage 0.
  int64_t shard = 0;
  // Optimizer states per element (Adam and AdamW: 2).
  int64_t states = 2;
};

// Bytes of each model state, in memory and on disk. Not counted here: the buffers that move
// them (communication staging, the disk step's sub-group buffers, whole stage-3 units).
struct StateBytes {
  // The parameters computed with: whole at stages 0-2 (the copy a rank maps, also when one
  // copy per host is shared), this rank's pieces at stage 3.
  int64_t memory_params = 0;
  int64_t memory_grads = 0;   // fp32: whole at stages 0-1, the shard at 2-3
  int64_t memory_master = 0;  // fp32 master (0 when the fp32 parameters are the master)
  // Optimizer states as stored (int8: codes and their block scales, which stay in memory
  // when the codes are on disk).
  int64_t memory_states = 0;
  int64_t disk_params = 0;
  int64_t disk_grads = 0;
  int64_t disk_master = 0;
  int64_t disk_states = 0;

  int64_t memory() const { return memory_params + memory_grads + memory_master + memory_states; }
  int64_t disk() const { return disk_params + disk_grads + disk_master + disk_states; }
};

// The shape of a model whose units have `unit_elems` trainable elements each, on `world`
// ranks, padded as partition::ModelLayout pads them: at stages 1-3 each unit to a multiple
// of world (every rank owns 1/world of it), at stage 0 the whole buffer once.
StateShape state_shape(const std::vector<int64_t>& unit_elems, int world, int stage,
                       int64_t states);

StateBytes state_bytes(const Placement& placement, const StateShape& shape);

}  // namespace zoff::placement
