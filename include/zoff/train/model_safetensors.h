// `zoff train --save-model PATH.safetensors`: the trained model streamed into a safetensors
// file, one stage-3 unit whole at a time, so a model larger than RAM can be saved.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "zoff/engine/zero_engine.h"

namespace zoff::train {

// Writes every parameter (trainable ones in the engine's compute dtype: bf16 under bf16;
// frozen ones and buffers as the module holds them) to `path` with `metadata` (model,
// preset, context, step: what `zoff generate` rebuilds the model from). A tied parameter
// is stored once; its other names are listed in the metadata's "aliases", as zoff export
// does. `engine` null: the module's own tensors (plain LibTorch). Collective with an engine;
// only the leader writes, atomically. Returns the file's bytes (0 on other ranks).
uint64_t save_model_safetensors(engine::ZeroEngine* engine, torch::nn::Module& module,
                                const std::string& path,
                                const std::map<std::string, std::string>& metadata, bool leader);

}  // namespace zoff::train
