// Fills an ordinary LibTorch module with the parameters saved in a checkpoint.
#pragma once

#include <torch/torch.h>

#include <string>

#include "zoff/checkpoint/checkpoint.h"

namespace zoff::checkpoint {

// Copies every parameter and buffer of `module` (by its name in named_parameters() and
// named_buffers(); a tied tensor under either name) from the checkpoint at `dir_or_root`,
// one tensor in memory at a time, converting to the module tensor's dtype. Every module
// tensor must be in the checkpoint with the same shape, and every checkpoint tensor in the
// module; otherwise a zoff::UsageError naming it, with the module untouched. Returns the
// checkpoint's info (model, preset, step...).
CheckpointInfo load_module_from_checkpoint(torch::nn::Module& module,
                                           const std::string& dir_or_root);

}  // namespace zoff::checkpoint
