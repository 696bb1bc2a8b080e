// The C++ side of the Python tests' comparison: zoff's C++ GPT trained by the C++ engine.
#pragma once

#include <pybind11/pybind11.h>

namespace zoff::python {

// Adds _zoff._reference_gpt_run(gpt, config_json, state, tokens) -> (losses, master_shard):
// builds zoff::models::Gpt from `gpt` (a dict of GptConfig fields), copies `state` (name ->
// fp32 tensor, the Python model's state_dict) into it, hands it to a ZeroEngine on the
// process communicator and trains on `tokens` (int64 [steps, accum, B, T + 1]; inputs are
// [:, :-1], targets [:, 1:]) exactly as a C++ user would: forward, gpt_loss,
// engine.backward per micro-batch, engine.step per step. Returns each step's mean
// micro-batch loss and this rank's fp32 master shard at the end.
void bind_reference_run(pybind11::module_& m);

}  // namespace zoff::python
