// The engine behind zoff.initialize: a ZeroEngine over the mirror of a Python module.
#pragma once

#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "module_mirror.h"
#include "zoff/config/config.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::python {

// Owns the mirror (module_mirror.h) and the engine built on it. Methods that run autograd
// or collectives expect the caller to have released the GIL (the bindings do): LibTorch's
// Python autograd engine refuses to start with the GIL held, and Python hooks met during
// backward take it themselves. The constructor needs the GIL for the mirror and releases
// it around the engine's setup (broadcasts).
class PyEngine {
 public:
  // unit_modules: modules of `model` whose parameters each form one unit
  // (EngineOptions::unit_modules); empty: the engine's default. param_init: None, or a
  // callable (name, fp32 tensor) filling a deferred parameter's values in place
  // (EngineOptions::param_init; called with the GIL taken).
  PyEngine(pybind11::handle model, const std::string& config_json,
           std::chrono::milliseconds timeout, const pybind11::list& unit_modules,
           const pybind11::object& param_init);
  ~PyEngine();

  void backward(const at::Tensor& loss);
  engine::StepStats step();
  void synchronize() { engine_->synchronize(); }
  engine::MemoryStats memory() const { return engine_->memory(); }
  // A copy of this rank's fp32 parameter shard (tests compare it across paths).
  at::Tensor master_shard() { return engine_->master_shard().clone(); }
  // Sharded checkpoint under `root` (step_<n>/ and `latest`); returns the step directory.
  std::string save_checkpoint(const std::string& root);
  // Resumes from a directory save_checkpoint wrote (or its root); returns the step directory.
  std::string load_checkpoint(const std::string& dir_or_root);

  // Stage 3: what zoff::with_unit does around a unit's computation, for a module of the
  // model (Python forward pre/post hooks and the output's gradient hook call these).
  // No-ops below stage 3. Thread-safe like the unit gatherer they call.
  void before_forward(torch::nn::Module& module);
  void after_forward(torch::nn::Module& module);
  void before_backward(torch::nn::Module& module);

  const ModuleMirror& mirror() const { return mirror_; }
  const engine::ZeroEngine& engine() const { return *engine_; }
  const config::Config& config() const { return engine_->config(); }
  const std::string& config_json() const { return config_json_; }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->size(); }

 private:
  ModuleMirror mirror_;
  dist::CommPtr comm_;
  std::string config_json_;
  std::string model_name_;  // the Python class name, recorded in checkpoints
  std::unique_ptr<engine::ZeroEngine> engine_;
  int micro_ = 0;                // backward calls since the last step
  pybind11::object param_init_;  // the Python callable behind EngineOptions::param_init
};

}  // namespace zoff::python
