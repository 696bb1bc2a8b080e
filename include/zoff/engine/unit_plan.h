// Which parameters a model has (trainable, frozen, buffers, each once) and how the
// trainable ones group into units.
#pragma once

#include <torch/torch.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "zoff/partition/model_layout.h"

namespace zoff::engine {

struct UnitPlan {
  // Trainable parameters, each tensor once under the first name it was registered with
  // (a weight tied between two modules is one parameter, trained once).
  std::vector<std::pair<std::string, torch::Tensor>> trainable;
  // Parameters with requires_grad = false and module buffers (BatchNorm statistics...),
  // each once: kept whole on every rank, never sharded.
  std::vector<std::pair<std::string, torch::Tensor>> frozen;
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
  // Second names of tied tensors: (name, the first name it was registered under).
  std::vector<std::pair<std::string, std::string>> aliases;
  // Units over `trainable`: by default one per top-level child module that holds
  // trainable parameters, one per element of a top-level ModuleList, Sequential or
  // ModuleDict (a transformer block), and one for parameters of the root itself. Units
  // that share a parameter (tied weights) are merged into one.
  std::vector<partition::UnitSpec> units;
  // For every module of the tree, the units whose parameters it reads (what
  // zoff::with_unit(module, ...) gathers).
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units;
};

UnitPlan plan_units(torch::nn::Module& root);

}  // namespace zoff::engine
