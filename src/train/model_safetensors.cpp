// save_model_safetensors: declare every tensor, then stream the trainable ones unit by unit.
#include "zoff/train/model_safetensors.h"

#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "zoff/checkpoint/safetensors_writer.h"
#include "zoff/core/error.h"

namespace zoff::train {
namespace {

std::vector<int64_t> shape_of(const torch::Tensor& t) { return t.sizes().vec(); }

// Names of tensors already stored under another name (tied registrations), keyed by
// storage identity: second name -> first name.
nlohmann::ordered_json alias_names(const torch::nn::Module& module,
                                   const std::map<const void*, std::string>& stored) {
  nlohmann::ordered_json aliases = nlohmann::ordered_json::object();
  for (const auto& item : module.named_parameters()) {
    auto it = stored.find(item.value().unsafeGetTensorImpl());
    if (it != stored.end() && it->second != item.key()) aliases[item.key()] = it->second;
  }
  return aliases;
}

}  // namespace

uint64_t save_model_safetensors(engine::ZeroEngine* engine, torch::nn::Module& module,
                                const std::string& path,
                                const std::map<std::string, std::string>& metadata, bool leader) {
  checkpoint::SafetensorsWriter writer(path);
  for (const auto& [k, v] : metadata) writer.set_metadata(k, v);
  std::map<const void*, std::string> stored;  // TensorImpl -> the name it is stored under
  const auto named = module.named_parameters();
  std::map<std::string, torch::Tensor> by_name;
  for (const auto& item : named) by_name[item.key()] = item.value();
  // Trainable parameters: in the engine's visiting order (units in layout order).
  std::vector<std::string> trainable;
  if (engine != nullptr) {
    for (const auto& unit : engine->layout().units()) {
      for (size_t index : unit.slots) {
        const auto& slot = engine->layout().slots()[index];
        writer.declare(slot.name, engine->compute_dtype(), slot.shape);
        stored[by_name.at(slot.name).unsafeGetTensorImpl()] = slot.name;
        trainable.push_back(slot.name);
      }
    }
  }
  // Then what the module holds whole: every parameter without an engine, else the frozen
  // ones; and the buffers.
  std::vector<std::pair<std::string, torch::Tensor>> whole;
  for (const auto& item : named) {
    if (stored.count(item.value().unsafeGetTensorImpl()) == 1) continue;
    if (engine != nullptr && item.value().requires_grad()) continue;  // the engine's, tied
    stored[item.value().unsafeGetTensorImpl()] = item.key();
    whole.emplace_back(item.key(), item.value());
  }
  for (const auto& item : module.named_buffers()) whole.emplace_back(item.key(), item.value());
  for (const auto& [name, t] : whole) writer.declare(name, t.scalar_type(), shape_of(t));
  const auto aliases = alias_names(module, stored);
  if (!aliases.empty()) writer.set_metadata("aliases", aliases.dump());

  if (engine != nullptr) {
    engine->visit_parameters([&](const partition::ParamSlot& slot, const torch::Tensor& values) {
      if (leader) writer.write(slot.name, values.contiguous());
    });
  }
  if (!leader) return 0;
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : whole) writer.write(name, t.detach().contiguous());
  return writer.commit();
}

}  // namespace zoff::train
