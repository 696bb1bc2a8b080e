// zoff's fused bf16 CPU kernels (models/fused_layer_norm.h, models/fused_gelu.h) for Python.
#pragma once

#include <pybind11/pybind11.h>

namespace zoff::python {

// Adds _zoff.fused_layer_norm(x, weight, bias, eps) and _zoff.fused_gelu(x): differentiable
// ops on bf16 CPU tensors; anything else is a ValueError naming it. zoff.nn wraps them.
void bind_fused_ops(pybind11::module_& m);

}  // namespace zoff::python
