// PyEngine: engine setup from a Python module and JSON, usage checks, checkpoints, unit calls.
#include "py_engine.h"

#include "process_comm.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/core/error.h"
#include "zoff/dist/launcher.h"
#include "zoff/unit/unit_hooks.h"

namespace py = pybind11;

namespace zoff::python {
namespace {

// EngineOptions::param_init over a Python callable: the engine calls it without the GIL
// (from its setup), so it takes the GIL; an exception it raises becomes one line naming
// the parameter. It holds a borrowed handle (copies of the function object, made without
// the GIL, must not touch reference counts): the PyEngine keeps the callable alive.
unit::ParamInit python_param_init(py::handle fn) {
  return [fn](const std::string& name, torch::Tensor values) {
    std::string failure;
    {
      py::gil_scoped_acquire gil;
      try {
        fn(name, values);
      } catch (py::error_already_set& e) {
        failure = std::string(e.what());
      }
    }
    if (!failure.empty()) {
      throw UsageError("param_init(\"" + name + "\") raised " +
                       failure.substr(0, failure.find('\n')));
    }
  };
}

}  // namespace

PyEngine::PyEngine(py::handle model, const std::string& config_json,
                   std::chrono::milliseconds timeout, const py::list& unit_modules,
                   const py::object& param_init)
    : mirror_(mirror_module(model)),
      config_json_(config_json),
      model_name_(py::str(py::type::handle_of(model).attr("__name__")).cast<std::string>()),
      param_init_(param_init) {
  engine::EngineOptions options;
  for (auto m : unit_modules) options.unit_modules.push_back(&mirror_.of(m));
  if (!param_init_.is_none()) options.param_init = python_param_init(param_init_);
  py::gil_scoped_release no_gil;
  // `zoff launch` gives each rank cores / N threads in ZOFF_NUM_THREADS; LibTorch (shared
  // with Python's torch) does not read it by itself.
  const int threads = dist::set_torch_threads_from_env();
  comm_ = process_comm(timeout);
  auto cfg = config::parse_config(config_json_, comm_->size());
  options.optimizer_threads = threads > 0 ? threads : torch::get_num_threads();
  engine_ = std::make_unique<engine::ZeroEngine>(mirror_.root, std::move(cfg), comm_, options);
}

// The engine goes first: it removes its unit hooks from the mirror's modules.
PyEngine::~PyEngine() { engine_.reset(); }

void PyEngine::backward(const at::Tensor& loss) {
  const int64_t accum = engine_->config().gradient_accumulation_steps;
  ZOFF_CHECK_ARG(micro_ < accum, "engine.backward called ", micro_ + 1,
                 " times before engine.step(); gradient_accumulation_steps = ", accum);
  ZOFF_CHECK_ARG(loss.requires_grad(),
                 "engine.backward: the loss does not require grad (computed under no_grad, "
                 "or not from the engine's model)");
  engine_->backward(loss);
  ++micro_;
}

engine::StepStats PyEngine::step() {
  const int64_t accum = engine_->config().gradient_accumulation_steps;
  ZOFF_CHECK_ARG(micro_ == accum, "engine.step after ", micro_,
                 " engine.backward calls; gradient_accumulation_steps = ", accum,
                 ": call engine.backward(loss) once per micro-batch before engine.step()");
  auto stats = engine_->step();
  micro_ = 0;
  return stats;
}

namespace {
checkpoint::CheckpointInfo run_identity(const std::string& model) {
  checkpoint::CheckpointInfo run;
  run.model = "python:" + model;
  return run;
}
}  // namespace

std::string PyEngine::save_checkpoint(const std::string& root) {
  return checkpoint::save_checkpoint(*engine_, root, run_identity(model_name_));
}

std::string PyEngine::load_checkpoint(const std::string& dir_or_root) {
  auto info = checkpoint::load_checkpoint(*engine_, dir_or_root, run_identity(model_name_));
  micro_ = 0;
  return info.dir;
}

void PyEngine::before_forward(torch::nn::Module& module) {
  if (auto* hooks = unit::hooks_for(module)) hooks->before_forward(module);
}

void PyEngine::after_forward(torch::nn::Module& module) {
  if (auto* hooks = unit::hooks_for(module)) hooks->after_forward(module);
}

void PyEngine::before_backward(torch::nn::Module& module) {
  if (auto* hooks = unit::hooks_for(module)) hooks->before_backward(module);
}

}  // namespace zoff::python
