// plan_units: deduplicated parameter lists and the default unit partition of a module tree.
#include "zoff/engine/unit_plan.h"

#include <algorithm>
#include <functional>
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

using Candidates = std::vector<std::pair<std::string, torch::nn::Module*>>;

// The default unit modules: (name, module) pairs, each top-level child, each element of a
// top-level container (recursively).
void collect_default(const std::string& prefix, torch::nn::Module& m, Candidates* out) {
  for (auto& item : m.named_children()) {
    const std::string name = prefix.empty() ? item.key() : prefix + "." + item.key();
    if (is_container(*item.value())) {
      collect_default(name, *item.value(), out);
    } else {
      out->emplace_back(name, item.value().get());
    }
  }
}

// The given unit modules in tree order, named by path; every module not inside one of
// them lands in `outside` (its own parameters form units of their own).
void collect_given(const std::vector<const torch::nn::Module*>& given, torch::nn::Module& root,
                   Candidates* out, Candidates* outside) {
  std::unordered_map<const torch::nn::Module*, int> wanted;  // module -> times listed
  for (const auto* m : given) ++wanted[m];
  ZOFF_CHECK_ARG(!wanted.count(&root), "unit modules: the root module (", root.name(),
                 ") cannot be a unit module; list its children");
  size_t found = 0;
  std::function<void(const std::string&, torch::nn::Module&, const std::string&)> walk =
      [&](const std::string& path, torch::nn::Module& m, const std::string& inside) {
        for (auto& item : m.named_children()) {
          const std::string name = path.empty() ? item.key() : path + "." + item.key();
          torch::nn::Module* child = item.value().get();
          auto it = wanted.find(child);
          if (it != wanted.end()) {
            ZOFF_CHECK_ARG(inside.empty(), "unit modules: ", name, " (", child->name(),
                           ") is inside unit module ", inside, "; units cannot nest");
            ZOFF_CHECK_ARG(it->second == 1, "unit modules: ", name, " is listed ", it->second,
                           " times");
            if (out->end() == std::find_if(out->begin(), out->end(),
                                           [&](const auto& c) { return c.second == child; })) {
              out->emplace_back(name, child);
              ++found;
            }
          } else if (inside.empty()) {
            outside->emplace_back(name, child);
          }
          walk(name, *child, it != wanted.end() ? name : inside);
        }
      };
  walk("", root, "");
  ZOFF_CHECK_ARG(found == wanted.size(), "unit modules: ", wanted.size() - found, " of the ",
                 wanted.size(), " listed are not part of the model's module tree");
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

// Candidate units: the unit modules' parameters (recursively), then the own parameters of
// each module outside them (`owners`, the root last). A parameter read by two candidates
// (tied) joins them: union-find over candidates.
void group_units(torch::nn::Module& root, const std::vector<const torch::nn::Module*>& given,
                 const std::unordered_map<Impl, size_t>& index, UnitPlan* plan) {
  Candidates candidates, owners;
  if (given.empty()) {
    collect_default("", root, &candidates);
  } else {
    collect_given(given, root, &candidates, &owners);
  }
  const size_t n_units = candidates.size();
  candidates.insert(candidates.end(), owners.begin(), owners.end());
  candidates.emplace_back("(root)", &root);
  std::vector<std::vector<size_t>> members(candidates.size());
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
    for (auto& p : candidates[c].second->parameters(/*recurse=*/c < n_units)) claim(c, p);
  }

  std::vector<int> unit_of_group(members.size(), -1);
  for (size_t c = 0; c < members.size(); ++c) {
    if (members[c].empty()) continue;
    const size_t g = find_root(parent, c);
    const std::string& name = candidates[c].first;
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

UnitPlan plan_units(torch::nn::Module& root,
                    const std::vector<const torch::nn::Module*>& unit_modules) {
  UnitPlan plan;
  std::unordered_map<Impl, size_t> index;  // trainable tensor -> index in plan.trainable
  collect_tensors(root, &plan, &index);
  group_units(root, unit_modules, index, &plan);
  map_modules(root, index, &plan);
  return plan;
}

}  // namespace zoff::engine
