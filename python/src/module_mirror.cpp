// mirror_module: walks a Python module's _parameters, _buffers and _modules.
#include "module_mirror.h"

#include <string>

#include "zoff/core/error.h"

namespace py = pybind11;

namespace zoff::python {
namespace {

class Mirrorer {
 public:
  explicit Mirrorer(ModuleMirror* out) : out_(out) {
    py::module_ nn = py::module_::import("torch.nn");
    module_type_ = nn.attr("Module");
    containers_ =
        py::make_tuple(nn.attr("ModuleList"), nn.attr("Sequential"), nn.attr("ModuleDict"));
  }

  std::shared_ptr<torch::nn::Module> mirror(py::handle m, const std::string& path) {
    ZOFF_CHECK_ARG(py::isinstance(m, module_type_),
                   "zoff.initialize: ", path.empty() ? std::string("model") : path, " is a ",
                   py::str(py::type::handle_of(m).attr("__name__")).cast<std::string>(),
                   ", not a torch.nn.Module");
    if (auto it = out_->modules.find(m.ptr()); it != out_->modules.end()) return it->second;
    const bool container = py::isinstance(m, containers_);
    std::shared_ptr<torch::nn::Module> cpp;
    if (container) {
      cpp = std::make_shared<torch::nn::ModuleDictImpl>();
    } else {
      cpp = std::make_shared<torch::nn::Module>(
          py::str(py::type::handle_of(m).attr("__name__")).cast<std::string>());
    }
    out_->modules.emplace(m.ptr(), cpp);
    register_tensors(m, cpp.get());
    for (auto item : py::reinterpret_borrow<py::dict>(m.attr("_modules"))) {
      if (item.second.is_none()) continue;
      const auto name = item.first.cast<std::string>();
      auto child = mirror(item.second, path.empty() ? name : path + "." + name);
      if (container) {
        dynamic_cast<torch::nn::ModuleDictImpl&>(*cpp).update({{name, child}});
      } else {
        cpp->register_module(name, child);
      }
    }
    return cpp;
  }

 private:
  // Parameters keep their requires_grad (frozen ones stay frozen); None entries (a Linear
  // without bias) have no tensor to mirror.
  static void register_tensors(py::handle m, torch::nn::Module* cpp) {
    for (auto item : py::reinterpret_borrow<py::dict>(m.attr("_parameters"))) {
      if (item.second.is_none()) continue;
      auto t = item.second.cast<at::Tensor>();
      cpp->register_parameter(item.first.cast<std::string>(), t, t.requires_grad());
    }
    for (auto item : py::reinterpret_borrow<py::dict>(m.attr("_buffers"))) {
      if (item.second.is_none()) continue;
      cpp->register_buffer(item.first.cast<std::string>(), item.second.cast<at::Tensor>());
    }
  }

  ModuleMirror* out_;
  py::object module_type_;
  py::tuple containers_;
};

}  // namespace

torch::nn::Module& ModuleMirror::of(py::handle module) const {
  auto it = modules.find(module.ptr());
  ZOFF_CHECK_ARG(it != modules.end(), "module ",
                 py::str(py::type::handle_of(module).attr("__name__")).cast<std::string>(),
                 " is not part of the model this engine was built for");
  return *it->second;
}

ModuleMirror mirror_module(py::handle root) {
  ModuleMirror out;
  out.root = Mirrorer(&out).mirror(root, "");
  return out;
}

}  // namespace zoff::python
