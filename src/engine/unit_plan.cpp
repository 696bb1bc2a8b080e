// plan_units: deduplicated parameter lists and the default unit partition of a module tree.
#include "zoff/engine/unit_plan.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "zoff/core/error.h"

namespace zoff::engine {
namespace {

using Impl = const c10::TensorImpl*;

bool is_container(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::ModuleListImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::SequentialImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&m) != nullptr;
}

// The candidate units: (name, module) pairs whose parameters form one unit each.
void collect_candidates(const std::string& prefix, torch::nn::Module& m,
                        std::vector<std::pair<std::string, torch::nn::Module*>>* out) {
  for (auto& item : m.named_children()) {
    const std::string name = prefix.empty() ? item.key() : prefix + "." + item.key();
    if (is_container(*item.value())) {
      collect_candidates(name, *item.value(), out);
    } else {
      out->emplace_back(name, item.value().get());
    }
  }
}

size_t find_root(std::vector<size_t>& parent, size_t i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

// Trainable, frozen and buffer tensors, each once; `index` maps a trainable tensor to its
// place in plan->trainable.
void collect_tensors(torch::nn::Module& root, UnitPlan* plan,
                     std::unordered_map<Impl, size_t>* index) {
  std::unordered_map<Impl, std::string> seen;  // tensor -> its first name
  for (auto& item : root.named_parameters(/*recurse=*/true)) {
    Impl impl = item.value().unsafeGetTensorImpl();
    if (auto [it, fresh] = seen.emplace(impl, item.key()); !fresh) {
      plan->aliases.emplace_back(item.key(), it->second);  // a tied weight's second name
      continue;
    }
    if (item.value().requires_grad()) {
      index->emplace(impl, plan->trainable.size());
      plan->trainable.emplace_back(item.key(), item.value());
    } else {
      plan->frozen.emplace_back(item.key(), item.value());
    }
  }
  for (auto& item : root.named_buffers(/*recurse=*/true)) {
    if (auto [it, fresh] = seen.emplace(item.value().unsafeGetTensorImpl(), item.key()); fresh) {
      plan->buffers.emplace_back(item.key(), item.value());
    } else {
      plan->aliases.emplace_back(item.key(), it->second);
    }
  }
}

// Candidate units, the root's own parameters last. A parameter read by two candidates
// (tied) joins them: union-find over candidates.
void group_units(torch::nn::Module& root, const std::unordered_map<Impl, size_t>& index,
                 UnitPlan* plan) {
  std::vector<std::pair<std::string, torch::nn::Module*>> candidates;
  collect_candidates("", root, &candidates);
  std::vector<std::vector<size_t>> members(candidates.size() + 1);
  std::vector<int> owner(plan->trainable.size(), -1);
  std::vector<size_t> parent(members.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto claim = [&](size_t c, const torch::Tensor& p) {
    auto it = index.find(p.unsafeGetTensorImpl());
    if (it == index.end()) return;
    int& o = owner[it->second];
    if (o < 0) {
      o = static_cast<int>(c);
      members[c].push_back(it->second);
    } else {
      parent[find_root(parent, c)] = find_root(parent, static_cast<size_t>(o));
    }
  };
  for (size_t c = 0; c < candidates.size(); ++c) {
    for (auto& p : candidates[c].second->parameters(/*recurse=*/true)) claim(c, p);
  }
  for (auto& p : root.parameters(/*recurse=*/false)) claim(candidates.size(), p);

  std::vector<int> unit_of_group(members.size(), -1);
  for (size_t c = 0; c < members.size(); ++c) {
    if (members[c].empty()) continue;
    const size_t g = find_root(parent, c);
    const std::string name = c < candidates.size() ? candidates[c].first : "(root)";
    if (unit_of_group[g] < 0) {
      unit_of_group[g] = static_cast<int>(plan->units.size());
      plan->units.push_back({name, {}});
    } else {
      plan->units[static_cast<size_t>(unit_of_group[g])].name += "+" + name;
    }
    auto& params = plan->units[static_cast<size_t>(unit_of_group[g])].params;
    params.insert(params.end(), members[c].begin(), members[c].end());
  }
  for (auto& u : plan->units) std::sort(u.params.begin(), u.params.end());
}

// For every module of the tree, the units its parameters belong to.
void map_modules(torch::nn::Module& root, const std::unordered_map<Impl, size_t>& index,
                 UnitPlan* plan) {
  std::vector<size_t> unit_of_param(plan->trainable.size(), 0);
  for (size_t u = 0; u < plan->units.size(); ++u) {
    for (size_t p : plan->units[u].params) unit_of_param[p] = u;
  }
  for (const auto& m : root.modules(/*include_self=*/true)) {
    std::set<size_t> units;
    for (auto& p : m->parameters(/*recurse=*/true)) {
      auto it = index.find(p.unsafeGetTensorImpl());
      if (it != index.end()) units.insert(unit_of_param[it->second]);
    }
    plan->module_units[m.get()] = std::vector<size_t>(units.begin(), units.end());
  }
}

}  // namespace

UnitPlan plan_units(torch::nn::Module& root) {
  UnitPlan plan;
  std::unordered_map<Impl, size_t> index;  // trainable tensor -> index in plan.trainable
  collect_tensors(root, &plan, &index);
  group_units(root, index, &plan);
  map_modules(root, index, &plan);
  return plan;
}

}  // namespace zoff::engine
