// load_module_from_checkpoint: module parameters by name from a checkpoint's shards.
#include "zoff/checkpoint/load_module.h"

#include <set>

#include "zoff/checkpoint/checkpoint_reader.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint {

CheckpointInfo load_module_from_checkpoint(torch::nn::Module& module,
                                           const std::string& dir_or_root) {
  CheckpointReader reader(dir_or_root);
  const auto& info = reader.info();
  auto params = module.named_parameters();
  // Check names and shapes both ways before changing anything.
  std::set<std::string> in_module;
  for (const auto& item : params) {
    const auto& slot = reader.slot(item.key());
    ZOFF_CHECK_ARG(item.value().sizes().vec() == slot.shape, "parameter ", item.key(), ": shape ",
                   item.value().sizes(), " in the module, ", torch::IntArrayRef(slot.shape),
                   " in checkpoint ", info.dir);
    in_module.insert(item.key());
  }
  for (const auto& slot : info.slots) {
    ZOFF_CHECK_ARG(in_module.count(slot.name) == 1, "checkpoint ", info.dir, " has parameter ",
                   slot.name, ", which the module does not have");
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params) item.value().copy_(reader.read_param(reader.slot(item.key())));
  return info;
}

}  // namespace zoff::checkpoint
