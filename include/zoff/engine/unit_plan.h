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
  // Units over `trainable`: one per unit module (by default each top-level child module
  // that holds trainable parameters, each element of a top-level ModuleList, Sequential or
  // ModuleDict: a transformer block), and for the parameters outside every unit module one
  // per module that registered them (the root's own: "(root)"). Units that share a
  // parameter (tied weights) are merged into one.
  std::vector<partition::UnitSpec> units;
  // For every module of the tree, the units whose parameters it reads (what
  // zoff::with_unit(module, ...) gathers).
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units;
};

// `unit_modules`: modules of root's tree whose parameters (recursively) each form one unit,
// none inside another (a FSDP-style wrap policy: a Hugging Face model's decoder layers);
// empty: the default above. A module outside root's tree, root itself, a repeated module or
// one inside another throws zoff::UsageError naming it.
UnitPlan plan_units(torch::nn::Module& root,
                    const std::vector<const torch::nn::Module*>& unit_modules = {});

}  // namespace zoff::engine
