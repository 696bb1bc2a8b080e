// The umbrella header of zoff's public C++ API.
#pragma once

#include "zoff/checkpoint/checkpoint.h"
#include "zoff/config/config.h"
#include "zoff/config/lr_schedule.h"
#include "zoff/core/error.h"
#include "zoff/dist/comm.h"
#include "zoff/dist/world.h"
#include "zoff/engine/memory_stats.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/flat_layout.h"
#include "zoff/partition/model_layout.h"
#include "zoff/unit/activation_checkpoint.h"
#include "zoff/unit/unit_call.h"
