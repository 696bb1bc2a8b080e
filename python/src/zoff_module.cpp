// zoff._zoff: the native half of the `zoff` Python package (the Python half is zoff/*.py).
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <optional>
#include <type_traits>

#include "error_translation.h"
#include "fused_ops.h"
#include "process_comm.h"
#include "py_engine.h"
#include "reference_run.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/safetensors_export.h"
#include "zoff/train/op_profile.h"

namespace py = pybind11;

namespace zoff::python {
namespace {

py::dict tier_dict(const engine::TierBytes& t) {
  py::dict d;
  d["params"] = t.params;
  d["grads"] = t.grads;
  d["master"] = t.master;
  d["optim"] = t.optim;
  d["buffers"] = t.buffers;
  return d;
}

py::dict memory_dict(const engine::MemoryStats& m) {
  py::dict d;
  d["params"] = m.params();
  d["grads"] = m.grads();
  d["optim"] = m.optim();
  d["buffers"] = m.buffers();
  d["compute"] = tier_dict(m.compute);
  d["offload"] = tier_dict(m.offload);
  d["nvme"] = tier_dict(m.nvme);  // bytes on disk, not memory (memory_stats.h)
  d["live_unit_bytes"] = m.live_unit_bytes;
  d["peak_live_bytes"] = m.peak_live_bytes;
  d["host_shared_params"] = m.host_shared_params;
  d["activations"] = m.activations;
  return d;
}

py::dict step_dict(const engine::StepStats& s) {
  py::dict d;
  d["step"] = s.step;
  d["lr"] = s.lr;
  d["grad_norm"] = s.grad_norm;
  d["clipped"] = s.clipped;
  d["skipped"] = s.skipped;
  d["loss_scale"] = s.loss_scale;
  py::dict t;  // milliseconds (engine/step_times.h)
  t["backward"] = s.times.backward_ms;
  t["backward_reduce"] = s.times.backward_reduce_ms;
  t["step"] = s.times.step_ms;
  t["grad_norm"] = s.times.grad_norm_ms;
  t["optimizer"] = s.times.optimizer_ms;
  t["allgather"] = s.times.allgather_ms;
  d["times_ms"] = t;
  return d;
}

// f() run without the GIL, then Ctrl-C checked (error_translation.h).
template <typename F>
auto released(F&& f) {
  using R = decltype(f());
  if constexpr (std::is_void_v<R>) {
    {
      py::gil_scoped_release no_gil;
      f();
    }
    raise_pending_signals();
  } else {
    std::optional<R> result;
    {
      py::gil_scoped_release no_gil;
      result.emplace(f());
    }
    raise_pending_signals();
    return std::move(*result);
  }
}

void bind_unit_calls(py::class_<PyEngine>& c) {
  // The mirror lookup needs the GIL (its error names the Python class); the unit calls
  // may wait on all-gathers, so they run without it.
  c.def("before_forward", [](PyEngine& e, py::handle m) {
    auto& cpp = e.mirror().of(m);
    py::gil_scoped_release no_gil;
    e.before_forward(cpp);
  });
  c.def("after_forward", [](PyEngine& e, py::handle m) {
    auto& cpp = e.mirror().of(m);
    py::gil_scoped_release no_gil;
    e.after_forward(cpp);
  });
  c.def("before_backward", [](PyEngine& e, py::handle m) {
    auto& cpp = e.mirror().of(m);
    py::gil_scoped_release no_gil;
    e.before_backward(cpp);
  });
}

void bind_engine(py::module_& m) {
  py::class_<PyEngine> c(m, "Engine");
  c.def(py::init([](py::handle model, const std::string& json, double timeout_s,
                    const py::list& unit_modules, const py::object& param_init) {
          const auto ms = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
          return std::make_unique<PyEngine>(model, json, ms, unit_modules, param_init);
        }),
        py::arg("model"), py::arg("config_json"), py::arg("timeout_s"),
        py::arg("unit_modules") = py::list(), py::arg("param_init") = py::none());
  c.def("backward",
        [](PyEngine& e, const at::Tensor& loss) { released([&] { e.backward(loss); }); });
  c.def("step", [](PyEngine& e) { return step_dict(released([&] { return e.step(); })); });
  c.def("synchronize", [](PyEngine& e) { released([&] { e.synchronize(); }); });
  c.def("memory", [](const PyEngine& e) { return memory_dict(e.memory()); });
  c.def("master_shard", [](PyEngine& e) { return e.master_shard(); });
  c.def("save_checkpoint", [](PyEngine& e, const std::string& root) {
    return released([&] { return e.save_checkpoint(root); });
  });
  c.def("load_checkpoint", [](PyEngine& e, const std::string& dir) {
    return released([&] { return e.load_checkpoint(dir); });
  });
  bind_unit_calls(c);
  c.def_property_readonly("rank", &PyEngine::rank);
  c.def_property_readonly("world_size", &PyEngine::world_size);
  c.def_property_readonly("global_step",
                          [](const PyEngine& e) { return e.engine().global_step(); });
  c.def_property_readonly("compute_dtype", [](const PyEngine& e) {
    return std::string(c10::toString(e.engine().compute_dtype()));
  });
  c.def_property_readonly("config_warnings", [](const PyEngine& e) { return e.config().warnings; });
  c.def_property_readonly("train_batch_size",
                          [](const PyEngine& e) { return e.config().train_batch_size; });
  c.def_property_readonly("train_micro_batch_size_per_gpu", [](const PyEngine& e) {
    return e.config().train_micro_batch_size_per_gpu;
  });
  c.def_property_readonly("gradient_accumulation_steps",
                          [](const PyEngine& e) { return e.config().gradient_accumulation_steps; });
  c.def_property_readonly("zero_stage", [](const PyEngine& e) { return e.config().zero.stage; });
  c.def_property_readonly("unit_count",
                          [](const PyEngine& e) { return e.engine().layout().units().size(); });
}

void bind_functions(py::module_& m) {
  m.def(
      "export",
      [](const std::string& dir, const std::string& out) {
        auto s = released([&] { return checkpoint::export_safetensors(dir, out); });
        py::dict d;
        d["checkpoint_dir"] = s.checkpoint_dir;
        d["tensors"] = s.tensors;
        d["elements"] = s.elements;
        d["file_bytes"] = s.file_bytes;
        return d;
      },
      py::arg("dir"), py::arg("out"));
  m.def("world", [] {
    const auto w = python_world();
    py::dict d;
    d["rank"] = w.rank;
    d["world_size"] = w.world_size;
    d["local_rank"] = w.local_rank;
    d["master_addr"] = w.master_addr;
    d["zoff_port"] = w.master_port;
    return d;
  });
}

// zoff.OpProfile's native half: the recorder of zoff train --profile (op_profile.h).
void bind_op_profile(py::module_& m) {
  py::class_<train::OpProfile> c(m, "OpProfile");
  c.def(py::init<>());
  c.def("start", &train::OpProfile::start);
  c.def("stop", &train::OpProfile::stop, py::arg("steps"), py::arg("wall_seconds"));
  c.def("table", &train::OpProfile::table, py::arg("top"));
  c.def(  // as train --profile writes its table
      "write",
      [](const train::OpProfile& p, const std::string& path, size_t top) {
        checkpoint::write_file_atomically(path, p.table(top));
      },
      py::arg("path"), py::arg("top"));
  c.def("ops", [](const train::OpProfile& p) {
    py::list out;
    for (const auto& t : p.ops()) {
      py::dict d;
      d["name"] = t.name;
      d["calls"] = t.calls;
      d["self_us"] = t.self_us;
      d["total_us"] = t.total_us;
      d["other_thread"] = t.other_thread;
      out.append(d);
    }
    return out;
  });
}

}  // namespace
}  // namespace zoff::python

PYBIND11_MODULE(_zoff, m) {
  m.doc() = "zoff's native engine binding; use the `zoff` package, not this module";
  py::module_::import("torch");  // registers the Tensor conversions
  zoff::python::register_error_translation();
  zoff::python::bind_engine(m);
  zoff::python::bind_functions(m);
  zoff::python::bind_reference_run(m);
  zoff::python::bind_fused_ops(m);
  zoff::python::bind_op_profile(m);
}
