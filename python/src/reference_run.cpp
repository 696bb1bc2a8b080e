// _reference_gpt_run: the C++ GPT through the C++ engine, for bitwise comparisons in tests.
#include "reference_run.h"

#include <torch/csrc/utils/pybind.h>

#include "process_comm.h"
#include "zoff/config/config.h"
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/models/gpt.h"

namespace py = pybind11;

namespace zoff::python {
namespace {

models::GptConfig gpt_config(const py::dict& d) {
  models::GptConfig c;
  c.n_layer = d["n_layer"].cast<int64_t>();
  c.n_head = d["n_head"].cast<int64_t>();
  c.n_embd = d["n_embd"].cast<int64_t>();
  c.block_size = d["block_size"].cast<int64_t>();
  c.vocab_size = d["vocab_size"].cast<int64_t>();
  // fused_layer_norm and fused_gelu stay on: the Python GPT takes the same kernels (zoff.nn).
  return c;
}

void load_state(torch::nn::Module& model,
                const std::vector<std::pair<std::string, at::Tensor>>& state) {
  torch::NoGradGuard no_grad;
  auto params = model.named_parameters(/*recurse=*/true);
  for (const auto& [name, value] : state) {
    auto* p = params.find(name);
    ZOFF_CHECK_ARG(p != nullptr, "reference run: the C++ gpt has no parameter ", name);
    p->copy_(value);
  }
}

py::tuple run(const py::dict& gpt, const std::string& json, const py::dict& state_dict,
              const at::Tensor& tokens) {
  auto model = models::Gpt(gpt_config(gpt)).ptr();
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (auto item : state_dict) {
    state.emplace_back(item.first.cast<std::string>(), item.second.cast<at::Tensor>());
  }
  std::vector<double> losses;
  at::Tensor master;
  {
    py::gil_scoped_release no_gil;
    load_state(*model, state);
    auto comm = process_comm(std::chrono::seconds(300));
    engine::ZeroEngine engine(model, config::parse_config(json, comm->size()), comm);
    const int64_t T = tokens.size(3) - 1;
    for (int64_t s = 0; s < tokens.size(0); ++s) {
      double sum = 0.0;
      for (int64_t k = 0; k < tokens.size(1); ++k) {
        const auto batch = tokens[s][k];
        auto loss = models::gpt_loss(model->forward(batch.narrow(1, 0, T)), batch.narrow(1, 1, T));
        engine.backward(loss);
        sum += loss.item<double>();
      }
      engine.step();
      losses.push_back(sum / static_cast<double>(tokens.size(1)));
    }
    master = engine.master_shard().clone();
  }
  return py::make_tuple(losses, master);
}

}  // namespace

void bind_reference_run(py::module_& m) {
  m.def("_reference_gpt_run", &run, py::arg("gpt"), py::arg("config_json"), py::arg("state"),
        py::arg("tokens"));
}

}  // namespace zoff::python
