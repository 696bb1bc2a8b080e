// ZeroEngine: flat parameters, stage-dependent gradient reduction, the shard step, all-gather.
#include "zoff/engine/zero_engine.h"

#include <cmath>

#include "zoff/config/lr_schedule.h"
#include "zoff/core/error.h"

namespace zoff::engine {
namespace {

GradMode grad_mode_for_stage(int stage) {
  switch (stage) {
    case 0:
      return GradMode::kAllReduce;
    case 1:
      return GradMode::kReduceScatterAtBoundary;
    case 2:
      return GradMode::kReduceScatterEveryMicroBatch;
    default:
      throw UsageError(detail::concat("zero_optimization.stage = ", stage,
                                      ": this engine runs stages 0, 1 and 2"));
  }
}

}  // namespace

ZeroEngine::ZeroEngine(std::shared_ptr<torch::nn::Module> module, config::Config config,
                       dist::CommPtr comm, EngineOptions options)
    : module_(std::move(module)),
      config_(std::move(config)),
      comm_(std::move(comm)),
      options_(options) {
  ZOFF_CHECK_ARG(module_ != nullptr, "engine: no module");
  ZOFF_CHECK_ARG(config_.gradient_accumulation_steps >= 1,
                 "gradient_accumulation_steps = ", config_.gradient_accumulation_steps,
                 ": must be >= 1");
  const GradMode mode = grad_mode_for_stage(config_.zero.stage);

  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    ZOFF_CHECK_ARG(item.value().scalar_type() == torch::kFloat32, "parameter ", item.key(), " is ",
                   item.value().scalar_type(), ": the engine takes fp32 modules");
    named.emplace_back(item.key(), item.value());
    module_params_.push_back(item.value());
  }
  layout_ = std::make_unique<partition::FlatLayout>(named, comm_->size());
  shard_ = layout_->shard(comm_->rank());
  const auto device = module_params_.front().device();
  params_ = std::make_unique<partition::FlatBuffer>(*layout_, torch::kFloat32, device);
  params_->adopt_parameters(module_params_);
  // Every rank starts from rank 0's weights, whatever its own initialisation did.
  comm_->broadcast(params_->flat(), 0)->wait();

  reducer_ =
      std::make_unique<GradReducer>(*layout_, module_params_, comm_, mode,
                                    config_.zero.reduce_bucket_size, config_.zero.overlap_comm);
  // Stage 0 updates every parameter on every rank; stages 1 and 2 only this rank's shard.
  const int64_t opt_numel = config_.zero.stage == 0 ? layout_->padded_numel() : shard_.size;
  optimizer_ = optim::make_shard_optimizer(config_.optimizer, static_cast<size_t>(opt_numel),
                                           options_.optimizer_backend, options_.optimizer_threads);
}

void ZeroEngine::backward(const torch::Tensor& loss) {
  ZOFF_CHECK_ARG(loss.numel() == 1, "engine.backward: loss has ", loss.numel(),
                 " elements, expected a scalar");
  const bool boundary = micro_ + 1 == config_.gradient_accumulation_steps;
  ZOFF_CHECK(
      micro_ < config_.gradient_accumulation_steps, "engine.backward called ", micro_ + 1,
      " times before step(); gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  reducer_->begin_backward(boundary);
  try {
    // Micro-batch losses are means over their micro-batch; the step's gradient is their
    // mean over the accumulation (and, after reduction, over ranks).
    (loss / static_cast<double>(config_.gradient_accumulation_steps)).backward();
  } catch (...) {
    reducer_->end_backward();
    throw;
  }
  reducer_->end_backward();
  ++micro_;
}

StepStats ZeroEngine::step() {
  ZOFF_CHECK(
      micro_ == config_.gradient_accumulation_steps, "engine.step after ", micro_,
      " backward calls; gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  torch::NoGradGuard no_grad;
  StepStats stats;
  auto grads = reducer_->reduced_grads();
  grads.div_(static_cast<double>(comm_->size()));

  // Global gradient norm: the shards are disjoint, so the squares add up across ranks.
  auto sq = grads.square().sum(0, /*keepdim=*/true).to(torch::kFloat64);
  if (config_.zero.stage > 0 && comm_->size() > 1) comm_->all_reduce_sum(sq)->wait();
  stats.grad_norm = std::sqrt(sq.item<double>());
  if (config_.gradient_clipping > 0.0) {
    // Same rule as torch::nn::utils::clip_grad_norm_.
    const double coef = config_.gradient_clipping / (stats.grad_norm + 1e-6);
    if (coef < 1.0) {
      grads.mul_(coef);
      stats.clipped = true;
    }
  }

  stats.lr = config::lr_at(config_.scheduler, config_.optimizer.lr, step_);
  torch::Tensor target = config_.zero.stage == 0 ? params_->flat() : params_->range(shard_);
  optimizer_->step(target.data_ptr<float>(), grads.data_ptr<float>(), stats.lr,
                   optim::CopyOut::kNone, nullptr);
  if (config_.zero.stage > 0) all_gather_params();
  reducer_->zero_grads();
  micro_ = 0;
  stats.step = ++step_;
  return stats;
}

void ZeroEngine::all_gather_params() {
  if (comm_->size() == 1) return;
  torch::NoGradGuard no_grad;
  // Gather in chunks of at most allgather_bucket_size elements in total: chunk c takes the
  // same sub-range of every rank's shard, so each rank's piece stays contiguous.
  const int64_t world = comm_->size();
  const int64_t per_rank = std::max<int64_t>(1, config_.zero.allgather_bucket_size / world);
  auto flat = params_->flat();
  for (int64_t start = 0; start < shard_.size; start += per_rank) {
    const int64_t n = std::min(per_rank, shard_.size - start);
    auto input = flat.narrow(0, shard_.offset + start, n).clone();
    if (n == shard_.size) {
      // One chunk: the ranks' shards are adjacent in the flat buffer, gather in place.
      comm_->all_gather(input, flat)->wait();
      return;
    }
    auto output = torch::empty({n * world}, flat.options());
    comm_->all_gather(input, output)->wait();
    for (int64_t r = 0; r < world; ++r) {
      flat.narrow(0, r * shard_.size + start, n).copy_(output.narrow(0, r * n, n));
    }
  }
}

void ZeroEngine::set_global_step(int64_t step) {
  step_ = step;
  optimizer_->set_step_count(step);
}

torch::Tensor ZeroEngine::master_shard() { return params_->range(shard_); }

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngine::optimizer_state_shard() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  // Stage 0's optimizer spans the whole padded buffer: hand out this rank's range of it.
  const int64_t offset = config_.zero.stage == 0 ? shard_.offset : 0;
  const int64_t numel = static_cast<int64_t>(optimizer_->numel());
  for (auto& [name, ptr] : optimizer_->state_buffers()) {
    auto whole = torch::from_blob(ptr, {numel}, torch::kFloat32);
    out.emplace_back(name, whole.narrow(0, offset, shard_.size));
  }
  return out;
}

void ZeroEngine::restore_from_shards(int64_t step) {
  torch::NoGradGuard no_grad;
  all_gather_params();
  if (config_.zero.stage == 0 && comm_->size() > 1) {
    // Every rank of stage 0 holds the whole optimizer state: gather it from the shards.
    const int64_t numel = static_cast<int64_t>(optimizer_->numel());
    for (auto& [name, ptr] : optimizer_->state_buffers()) {
      auto whole = torch::from_blob(ptr, {numel}, torch::kFloat32);
      auto mine = whole.narrow(0, shard_.offset, shard_.size).clone();
      comm_->all_gather(mine, whole)->wait();
    }
  }
  set_global_step(step);
}

MemoryStats ZeroEngine::memory() const {
  MemoryStats m;
  m.compute.params = params_->bytes();
  m.compute.grads = reducer_->grad_bytes();
  m.compute.optim = optimizer_->state_bytes();
  m.compute.buffers = reducer_->buffer_bytes();
  return m;
}

}  // namespace zoff::engine
