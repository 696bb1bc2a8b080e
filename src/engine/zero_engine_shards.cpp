// ZeroEngine's checkpoint access: this rank's master and optimizer state, and restoring them.
#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine {

torch::Tensor ZeroEngine::master_shard() {
  ZOFF_CHECK(!pending_update_.valid(),
             "master_shard() during a delayed update: synchronize() first");
  // Stage 0's master is the whole buffer, whose single region splits rank by rank.
  return stage_ == 0 ? master_.narrow(0, shard_.offset, shard_.size) : master_;
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngine::optimizer_state_shard() {
  ZOFF_CHECK(!pending_update_.valid(),
             "optimizer_state_shard() during a delayed update: synchronize() first");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const int64_t numel = static_cast<int64_t>(optimizer_->numel());
  for (auto& [name, ptr] : optimizer_->state_buffers()) {
    auto whole = torch::from_blob(ptr, {numel}, torch::kFloat32);
    out.emplace_back(name, stage_ == 0 ? whole.narrow(0, shard_.offset, shard_.size) : whole);
  }
  return out;
}

void ZeroEngine::restore_from_shards(int64_t step, int64_t applied_steps) {
  ZOFF_CHECK(!pending_update_.valid(), "restore_from_shards during a delayed update");
  torch::NoGradGuard no_grad;
  if (stage_ == 0 && comm_->size() > 1) {
    // Every rank of stage 0 holds the whole master and optimizer state: gather them.
    auto gather = [&](torch::Tensor whole) {
      auto mine = whole.narrow(0, shard_.offset, shard_.size).clone();
      comm_->all_gather(mine, whole)->wait();
    };
    const int64_t numel = static_cast<int64_t>(optimizer_->numel());
    for (auto& [name, ptr] : optimizer_->state_buffers()) {
      gather(torch::from_blob(ptr, {numel}, torch::kFloat32));
    }
    gather(master_);
  }
  if (compute_dtype_ != torch::kFloat32) {
    // The 16-bit parameters are the master rounded to nearest even, as the fused pass does.
    optimizer_output().copy_(master_);
  }
  publish_params();
  step_ = step;
  applied_ = applied_steps < 0 ? step : applied_steps;
  optimizer_->set_step_count(applied_);
}

}  // namespace zoff::engine
