// Parameters without memory: a model larger than RAM is built, then valued unit by unit.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

namespace zoff::unit {

// Fills `values` (fp32, contiguous, the parameter's shape) in place with the initial values
// of the trainable parameter called `name` in the module handed to the engine (e.g.
// "blocks.3.fc.weight"). The engine calls it once per parameter, unit by unit, into the
// unit's fp32 staging buffer, so at most one unit's values exist at once (DeepSpeed's
// zero.Init and FSDP's param_init_fn solve the same problem). It must give the same values
// on every rank and whatever order the parameters are asked in: rank 0's values win (they
// are broadcast), and the engine asks in its buffer order, not construction order.
using ParamInit = std::function<void(const std::string& name, torch::Tensor values)>;

// Replaces the data of every trainable parameter of `module` and its descendants with a
// placeholder of the same shape, dtype and device that holds one element (an expanded
// scalar, every stride 0): the values are dropped and their memory freed (the tensor
// itself stays, so modules that hold it, and tied registrations, still refer to it).
// Hand the module to the engine with EngineOptions::param_init; the engine gives each
// parameter its memory and values. Left as they are: frozen parameters (requires_grad
// false) and buffers, which the engine keeps whole on every rank from the module's own
// values, and parameters of at most one element (nothing to save).
void defer_parameters(torch::nn::Module& module);

// The placeholder defer_parameters gives a tensor of `sizes`: one element of `options`
// (dtype, device) expanded to the shape, every stride 0.
torch::Tensor placeholder(at::IntArrayRef sizes, const torch::TensorOptions& options);

// True for a placeholder made by defer_parameters: more elements than its storage holds.
bool is_deferred(const torch::Tensor& t);

}  // namespace zoff::unit
