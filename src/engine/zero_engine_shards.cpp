// ZeroEngine's checkpoint access: this rank's master and optimizer state, and restoring them.
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine {

optim::ShardOptimizer& ZeroEngine::optimizer() {
  optim::ShardOptimizer* o = store_->memory_optimizer();
  ZOFF_CHECK(o != nullptr,
             "engine.optimizer(): the optimizer state lives in the nvme tier (see tiered())");
  return *o;
}

torch::Tensor ZeroEngine::master_shard() {
  torch::Tensor master = store_->master();
  ZOFF_CHECK(master.defined(),
             "master_shard(): the master is not an fp32 tensor in memory (it is on disk, or split: "
             "use state_sections())");
  ZOFF_CHECK(!update_pending(), "master_shard() during a delayed update: synchronize() first");
  // Stage 0's master is the whole buffer, whose single region splits rank by rank.
  return stage() == 0 ? master.narrow(0, shard_.offset, shard_.size) : master;
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngine::optimizer_state_shard() {
  ZOFF_CHECK(store_->master().defined(),
             "optimizer_state_shard(): no fp32 master in memory (on disk, or split: use "
             "state_sections())");
  ZOFF_CHECK(!update_pending(),
             "optimizer_state_shard() during a delayed update: synchronize() first");
  ZOFF_CHECK_ARG(config_.optimizer.state_dtype == "fp32",
                 "optimizer_state_shard(): the states are ", config_.optimizer.state_dtype,
                 ", not fp32 tensors (use state_sections())");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  optim::ShardOptimizer& o = optimizer();
  const int64_t numel = static_cast<int64_t>(o.numel());
  for (auto& [name, ptr] : o.state_buffers()) {
    auto whole = torch::from_blob(ptr, {numel}, torch::kFloat32);
    out.emplace_back(name, stage() == 0 ? whole.narrow(0, shard_.offset, shard_.size) : whole);
  }
  return out;
}

// Stage 0's store holds the whole buffer, its int8 blocks segmented by shard: this rank's
// slice of it. Stages 1-3: the whole store.
std::vector<StateSection> ZeroEngine::state_sections() {
  ZOFF_CHECK(!update_pending(), "state_sections() during a delayed update: synchronize() first");
  return store_->sections(stage() == 0 ? shard_.offset : 0, shard_.size);
}

void ZeroEngine::restore_from_shards(int64_t step, int64_t applied_steps) {
  ZOFF_CHECK(!update_pending(), "restore_from_shards during a delayed update");
  torch::NoGradGuard no_grad;
  // Every rank of stage 0 holds the whole master and optimizer state: gather them.
  if (stage() == 0 && comm_->size() > 1) store_->share_slices(*comm_, shard_.size);
  params_->rebuild(*store_);
  params_->publish(&times_);
  step_ = step;
  applied_ = applied_steps < 0 ? step : applied_steps;
  store_->set_step_count(applied_);
}

}  // namespace zoff::engine
