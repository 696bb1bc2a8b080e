// Loading a checkpoint written at another world size or ZeRO stage (the checkpoint
// area's own helpers, not public API).
#pragma once

#include <cstdint>
#include <vector>

#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/rank_file.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::checkpoint {

// Checks rank `rank`'s file of the checkpoint completely (length, CRC32, header,
// sections); a bad one is a zoff::UsageError naming the file.
RankFileHeader verify_rank_file_of(const CheckpointInfo& info, int rank);

// True when the checkpoint's layout is not this engine's (another world size, another
// stage's units): its values must be found by parameter name and element range.
bool needs_resharding(const CheckpointInfo& info, const engine::ZeroEngine& engine);

// Checks that every parameter of the engine is in the checkpoint under the same name with
// the same shape (and no other); a difference is a zoff::UsageError naming it.
void check_same_parameters(const CheckpointInfo& info, const engine::ZeroEngine& engine);

// Fills this rank's master and optimizer-state shards from whichever old rank files hold
// their elements (verifying each file it reads), the frozen parameters and buffers from
// old rank 0's file; returns the RNG state of old rank (rank mod old world size).
// Streams: never more than one 16 MiB chunk in memory.
std::vector<uint8_t> read_resharded(const CheckpointInfo& info, engine::ZeroEngine& engine);

}  // namespace zoff::checkpoint
