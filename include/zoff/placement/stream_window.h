// How many sub-group buffers the streamed-gradient window holds when the config leaves it to
// zoff (offload_optimizer.stream_buffers = 0): the engine's rule, which the planner counts.
#pragma once

#include <cstdint>

namespace zoff::placement {

// Backward hands the window one reduced bucket at a time (stage 3: a unit), this rank's
// piece of it, `burst_elems`, all at once; the window must take the whole piece beside the
// sub-groups the step may still hold (`slots`), or backward stops at every unit until the
// step has drained most of the last one (gpt 6.7b: a unit spans 21 sub-groups of 1e7). So:
// the piece's sub-groups (one more when it starts inside one) plus `slots`, and at least
// 4 x slots and 8. Throws zoff::UsageError naming a `group_elems` or `slots` below 1.
int64_t auto_stream_buffers(int64_t slots, int64_t group_elems, int64_t burst_elems);

}  // namespace zoff::placement
