// ZeroEngine's checkpoint access: this rank's master and optimizer state, and restoring them.
#include <cstring>

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
  ZOFF_CHECK(master_.defined(),
             "master_shard(): the master lives in the nvme tier (use state_sections())");
  ZOFF_CHECK(!pending_update_.valid(),
             "master_shard() during a delayed update: synchronize() first");
  // Stage 0's master is the whole buffer, whose single region splits rank by rank.
  return stage() == 0 ? master_.narrow(0, shard_.offset, shard_.size) : master_;
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngine::optimizer_state_shard() {
  ZOFF_CHECK(master_.defined(),
             "optimizer_state_shard(): the states live in the nvme tier (use state_sections())");
  ZOFF_CHECK(!pending_update_.valid(),
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
  ZOFF_CHECK(!pending_update_.valid(),
             "state_sections() during a delayed update: synchronize() first");
  return store_->sections(stage() == 0 ? shard_.offset : 0, shard_.size);
}

// The compute parameters from the master: rounded to the compute dtype (nearest even, as
// the fused pass does). From a disk store, sub-group by sub-group.
void ZeroEngine::rebuild_compute_from_master() {
  if (master_.defined()) {
    // Without a 16-bit shard the publish rounds from the master itself.
    if (compute_dtype_ != torch::kFloat32 && optimizer_output().defined()) {
      optimizer_output().copy_(master_);
    }
    return;
  }
  // A multiple of 2048 elements: 16-bit chunks of the parameter region start aligned.
  const int64_t chunk = store_->tiered()->sub_group_elems();
  auto buf = torch::empty({chunk}, torch::kFloat32);
  offload::HostBuffer out;
  if (param_region_) {
    out = offload::HostBuffer(static_cast<size_t>(chunk) * c10::elementSize(compute_dtype_),
                              param_tier_->alignment());
  }
  for (int64_t at = 0; at < shard_.size; at += chunk) {
    const int64_t n = std::min(chunk, shard_.size - at);
    store_->read_master(static_cast<size_t>(at), static_cast<size_t>(n), buf.data_ptr<float>());
    if (!param_region_) {
      shard_space_.narrow(0, at, n).copy_(buf.narrow(0, 0, n));
      continue;
    }
    auto rounded = buf.narrow(0, 0, n).to(compute_dtype_);
    const size_t bytes = static_cast<size_t>(rounded.nbytes());
    std::memcpy(out.data(), rounded.data_ptr(), bytes);
    param_region_
        ->write(static_cast<uint64_t>(at) * c10::elementSize(compute_dtype_), out.data(), bytes)
        .wait();
  }
}

void ZeroEngine::restore_from_shards(int64_t step, int64_t applied_steps) {
  ZOFF_CHECK(!pending_update_.valid(), "restore_from_shards during a delayed update");
  torch::NoGradGuard no_grad;
  // Every rank of stage 0 holds the whole master and optimizer state: gather them.
  if (stage() == 0 && comm_->size() > 1) store_->share_slices(*comm_, shard_.size);
  rebuild_compute_from_master();
  publish_params();
  step_ = step;
  applied_ = applied_steps < 0 ? step : applied_steps;
  store_->set_step_count(applied_);
}

}  // namespace zoff::engine
