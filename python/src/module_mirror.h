// A C++ torch::nn::Module tree that mirrors a Python torch.nn.Module tree over the same tensors.
#pragma once

#include <torch/csrc/utils/pybind.h>
#include <torch/torch.h>

#include <memory>
#include <unordered_map>

namespace zoff::python {

// The engine plans units over, and re-binds parameters of, a C++ module tree. A Python
// module is not one, so the mirror has one C++ module per Python module, with the same
// child names, and registers the very same parameter and buffer tensors (one TensorImpl,
// no copy): when the engine points a parameter at its flat buffers (set_data) or frees a
// stage-3 unit's storage, the Python module sees it. Python containers (ModuleList,
// Sequential, ModuleDict) become C++ ModuleDicts under the same names, so the engine's
// default units (one per element of a top-level container) are the same as for a C++
// model. A submodule or tensor shared by two parents is shared in the mirror too (tied
// weights are found by tensor identity, as in C++).
struct ModuleMirror {
  std::shared_ptr<torch::nn::Module> root;
  // Every Python module of the tree (by object address; the caller keeps the tree alive)
  // and its mirror.
  std::unordered_map<const PyObject*, std::shared_ptr<torch::nn::Module>> modules;

  // The mirror of a module of the tree; a module outside it is a zoff::UsageError.
  torch::nn::Module& of(pybind11::handle module) const;
};

ModuleMirror mirror_module(pybind11::handle root);

}  // namespace zoff::python
