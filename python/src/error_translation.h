// How zoff's and LibTorch's C++ exceptions reach Python.
#pragma once

#include <pybind11/pybind11.h>

namespace zoff::python {

// zoff::UsageError (a bad config value, a bad call) -> ValueError; zoff::Error and
// c10::Error -> RuntimeError with the message's first part only (no C++ backtrace); a
// Python exception raised inside autograd (a hook, Ctrl-C) -> that exception itself.
void register_error_translation();

// After a call made without the GIL: a Ctrl-C that arrived meanwhile becomes
// KeyboardInterrupt now rather than at some later bytecode.
void raise_pending_signals();

}  // namespace zoff::python
