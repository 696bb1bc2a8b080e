// The process-wide registry from modules to the hooks of the engine that owns them.
#include "zoff/unit/unit_hooks.h"

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "zoff/core/error.h"

namespace zoff::unit {
namespace {

// Ranks run as threads in tests, each with its own model and engine: the registry is
// shared, keyed by module address, and read far more often than written.
struct Registry {
  std::shared_mutex mutex;
  std::unordered_map<const torch::nn::Module*, UnitHooks*> hooks;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void install_hooks(torch::nn::Module& root, UnitHooks* hooks) {
  ZOFF_CHECK(hooks != nullptr, "install_hooks: no hooks");
  auto& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  const auto modules = root.modules(/*include_self=*/true);
  // All or nothing: a half-done install would leave modules pointing at hooks whose owner
  // (an engine whose constructor threw) is gone.
  for (const auto& m : modules) {
    auto it = r.hooks.find(m.get());
    ZOFF_CHECK_ARG(it == r.hooks.end() || it->second == hooks, "module ", m->name(),
                   " already belongs to another zoff engine: one engine per model");
  }
  for (const auto& m : modules) r.hooks[m.get()] = hooks;
}

void remove_hooks(torch::nn::Module& root) {
  auto& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mutex);
  for (const auto& m : root.modules(/*include_self=*/true)) r.hooks.erase(m.get());
}

UnitHooks* hooks_for(const torch::nn::Module& module) {
  auto& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mutex);
  auto it = r.hooks.find(&module);
  return it == r.hooks.end() ? nullptr : it->second;
}

}  // namespace zoff::unit
