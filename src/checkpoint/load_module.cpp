// load_module_from_checkpoint: module parameters and buffers by name from a checkpoint.
#include "zoff/checkpoint/load_module.h"

#include <map>
#include <set>

#include "zoff/checkpoint/checkpoint_reader.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint {
namespace {

// Every tensor the module registers, by name (a tied tensor under each of its names).
std::vector<std::pair<std::string, torch::Tensor>> named_tensors(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& item : module.named_parameters()) out.emplace_back(item.key(), item.value());
  for (auto& item : module.named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

// Names and shapes both ways, before anything changes.
void check_names_and_shapes(const CheckpointInfo& info,
                            const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::map<std::string, std::vector<int64_t>> in_checkpoint;
  for (const auto& s : info.slots) in_checkpoint[s.name] = s.shape;
  for (const auto& e : info.replicated) in_checkpoint[e.name] = e.shape;
  for (const auto& [alias, first] : info.aliases) in_checkpoint[alias] = in_checkpoint[first];
  std::set<std::string> in_module;
  for (const auto& [name, t] : tensors) {
    auto it = in_checkpoint.find(name);
    ZOFF_CHECK_ARG(it != in_checkpoint.end(), "checkpoint ", info.dir, " has no tensor '", name,
                   "', which the module has");
    ZOFF_CHECK_ARG(t.sizes().vec() == it->second, "tensor ", name, ": shape ", t.sizes(),
                   " in the module, ", torch::IntArrayRef(it->second), " in checkpoint ", info.dir);
    in_module.insert(name);
  }
  for (const auto& [name, shape] : in_checkpoint) {
    ZOFF_CHECK_ARG(in_module.count(name) == 1, "checkpoint ", info.dir, " has tensor ", name,
                   ", which the module does not have");
  }
}

}  // namespace

CheckpointInfo load_module_from_checkpoint(torch::nn::Module& module,
                                           const std::string& dir_or_root) {
  CheckpointReader reader(dir_or_root);
  const auto& info = reader.info();
  auto tensors = named_tensors(module);
  check_names_and_shapes(info, tensors);
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : tensors) t.copy_(reader.read_named(name));
  return info;
}

}  // namespace zoff::checkpoint
