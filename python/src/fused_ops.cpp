// _zoff.fused_layer_norm, _zoff.fused_gelu, _zoff.fused_causal_softmax, the C++ gpt's
// causal attention and the widened 16-bit matrix products: the C++ autograd functions,
// called from Python.
#include "fused_ops.h"

#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>

#include "zoff/models/causal_attention.h"
#include "zoff/models/fused_causal_softmax.h"
#include "zoff/models/fused_gelu.h"
#include "zoff/models/fused_layer_norm.h"
#include "zoff/models/widened_products.h"

namespace py = pybind11;

namespace zoff::python {

namespace {

// The products models/widened_products.h computes in fp32 and rounds once; each falls back
// to LibTorch's own op where its operand is not widened (fp32, or bf16 on a CPU with bf16
// dot products), so zoff.nn can call them for any dtype.
void bind_widened_products(py::module_& m) {
  m.def(
      "widened_linear",
      [](const torch::Tensor& x, const torch::Tensor& w, const std::optional<torch::Tensor>& b) {
        return models::widened_linear(x, w, b.value_or(torch::Tensor()));
      },
      py::arg("x"), py::arg("weight"), py::arg("bias") = py::none(),
      py::call_guard<py::gil_scoped_release>());
  m.def("widened_matmul", &models::widened_matmul, py::arg("a"), py::arg("b"),
        py::call_guard<py::gil_scoped_release>());
  m.def("widened_bmm", &models::widened_bmm, py::arg("a"), py::arg("b"),
        py::call_guard<py::gil_scoped_release>());
  m.def("widened_baddbmm", &models::widened_baddbmm, py::arg("c"), py::arg("a"), py::arg("b"),
        py::arg("beta"), py::arg("alpha"), py::call_guard<py::gil_scoped_release>());
  // Whether bf16 products are widened in this process (ZOFF_BF16_PRODUCTS, else the CPU),
  // and the process-wide choice: "auto", "native" or "widened".
  m.def("bf16_products_widened", &models::bf16_products_widened);
  m.def(
      "set_bf16_products",
      [](const std::string& mode) {
        if (mode == "auto") return models::set_bf16_products(models::Bf16Products::kAuto);
        if (mode == "native") return models::set_bf16_products(models::Bf16Products::kNative);
        if (mode == "widened") return models::set_bf16_products(models::Bf16Products::kWidened);
        throw py::value_error("set_bf16_products: mode = '" + mode +
                              "': expected 'auto', 'native' or 'widened'");
      },
      py::arg("mode"));
}

}  // namespace

void bind_fused_ops(py::module_& m) {
  // Tensors in and out are autograd Variables: the C++ functions' backward joins Python's
  // graph. The GIL is released while the kernel runs.
  m.def("fused_layer_norm", &models::fused_layer_norm, py::arg("x"), py::arg("weight"),
        py::arg("bias"), py::arg("eps"), py::call_guard<py::gil_scoped_release>());
  m.def("fused_gelu", &models::fused_gelu, py::arg("x"), py::call_guard<py::gil_scoped_release>());
  m.def("fused_causal_softmax", &models::fused_causal_softmax, py::arg("scores"), py::arg("scale"),
        py::call_guard<py::gil_scoped_release>());
  // The C++ gpt's attention (models::causal_attention), no dropout: kernel "auto",
  // "materialized" or "flash" (another name raises ValueError naming it).
  m.def(
      "causal_attention",
      [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
         const std::string& kernel) {
        models::CausalAttentionOptions o;
        o.kernel = models::parse_attention_kernel(kernel);
        return models::causal_attention(q, k, v, o);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("kernel") = "auto",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "flash_attention_applies",
      [](const std::string& kernel, int64_t T, torch::ScalarType dtype, bool cpu) {
        return models::flash_attention_applies(models::parse_attention_kernel(kernel), T, dtype,
                                               cpu, /*dropout_active=*/false);
      },
      py::arg("kernel"), py::arg("T"), py::arg("dtype"), py::arg("cpu"));
  bind_widened_products(m);
}

}  // namespace zoff::python
