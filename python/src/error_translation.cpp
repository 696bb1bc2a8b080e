// register_error_translation: one pybind11 translator for every C++ exception type we expect.
#include "error_translation.h"

#include <torch/csrc/Exceptions.h>

#include "zoff/core/error.h"

namespace py = pybind11;

namespace zoff::python {

void register_error_translation() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (python_error& e) {
      e.restore();
    } catch (const UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const c10::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
}

void raise_pending_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

}  // namespace zoff::python
