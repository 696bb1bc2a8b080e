// _zoff.fused_layer_norm, _zoff.fused_gelu, _zoff.fused_causal_softmax: the C++ autograd
// functions, called from Python.
#include "fused_ops.h"

#include <torch/csrc/utils/pybind.h>

#include "zoff/models/fused_causal_softmax.h"
#include "zoff/models/fused_gelu.h"
#include "zoff/models/fused_layer_norm.h"

namespace py = pybind11;

namespace zoff::python {

void bind_fused_ops(py::module_& m) {
  // Tensors in and out are autograd Variables: the C++ functions' backward joins Python's
  // graph. The GIL is released while the kernel runs.
  m.def("fused_layer_norm", &models::fused_layer_norm, py::arg("x"), py::arg("weight"),
        py::arg("bias"), py::arg("eps"), py::call_guard<py::gil_scoped_release>());
  m.def("fused_gelu", &models::fused_gelu, py::arg("x"), py::call_guard<py::gil_scoped_release>());
  m.def("fused_causal_softmax", &models::fused_causal_softmax, py::arg("scores"), py::arg("scale"),
        py::call_guard<py::gil_scoped_release>());
}

}  // namespace zoff::python
