// zoff's fused bf16 CPU kernels (models/fused_{layer_norm,gelu,causal_softmax}.h) and widened
// 16-bit products (models/widened_products.h) for Python.
#pragma once

#include <pybind11/pybind11.h>

namespace zoff::python {

// Adds _zoff.fused_layer_norm(x, weight, bias, eps), _zoff.fused_gelu(x) and
// _zoff.fused_causal_softmax(scores, scale): differentiable
// ops on bf16 CPU tensors; anything else is a ValueError naming it. Also
// _zoff.causal_attention(q, k, v, kernel) and _zoff.flash_attention_applies(kernel, T, dtype,
// cpu) (models/causal_attention.h), _zoff.widened_{linear,matmul,bmm,baddbmm} and
// _zoff.bf16_products_widened(). zoff.nn wraps them.
void bind_fused_ops(pybind11::module_& m);

}  // namespace zoff::python
