// Fills an ordinary LibTorch module with the parameters saved in a checkpoint.
#pragma once

#include <torch/torch.h>

#include <string>

#include "zoff/checkpoint/checkpoint.h"

namespace zoff::checkpoint {

// Copies every parameter of `module` (by its name in named_parameters()) from the
// checkpoint at `dir_or_root`, one parameter in memory at a time, converting fp32 to the
// parameter's dtype. Every module parameter must be in the checkpoint with the same shape,
// and every checkpoint parameter must be in the module; otherwise a zoff::UsageError naming
// the parameter, with the module untouched. Module buffers (e.g. BatchNorm running
// statistics) are not part of checkpoints and keep their values. Returns the checkpoint's
// info (model, preset, step...).
CheckpointInfo load_module_from_checkpoint(torch::nn::Module& module,
                                           const std::string& dir_or_root);

}  // namespace zoff::checkpoint
