// The config as it ran: every key at its effective value, written back as DeepSpeed-style JSON.
#pragma once

#include <string>

#include "zoff/config/config.h"

namespace zoff::config {

// The normalized form of `c`: one JSON object with every key zoff reads at the value it
// took (defaults filled in, the batch triple resolved, "cpu_offload" and "bfloat16" in their
// current spelling, "Adam" with adam_w_mode spelled out as its type), nothing else: unknown
// keys, unused DeepSpeed keys and the user's formatting are gone, so its size is bounded
// whatever the input was. The sections that only exist when on are written when on:
// "scheduler" (absent = constant lr; its total_num_steps only when set) and
// "activation_checkpointing" ({} = on).
// parse_config(normalized_config_json(c), c.world_size) gives back a Config equal to c
// (warnings aside). Compact (no indentation), keys in a fixed order.
std::string normalized_config_json(const Config& c);

}  // namespace zoff::config
