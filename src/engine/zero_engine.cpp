// ZeroEngine: precision, the master copy and its tier, stage-dependent reduction, the
// fused shard step, loss scaling, and the parameter all-gather.
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

torch::Tensor host_fp32_like(const torch::Tensor& src, torch::Device where, bool pin) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(where);
  if (pin && where.is_cpu() && !src.device().is_cpu()) opts = opts.pinned_memory(true);
  auto out = torch::empty({src.numel()}, opts);
  out.copy_(src);
  return out;
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
  const auto& offload = config_.zero.offload_optimizer;
  ZOFF_CHECK_ARG(offload.device == "none" || offload.device == "cpu",
                 "zero_optimization.offload_optimizer.device = ", offload.device,
                 ": this engine offloads to cpu (nvme is not implemented yet)");
  offload_ = offload.device == "cpu";
  ZOFF_CHECK_ARG(!(config_.bf16 && config_.fp16.enabled), "bf16 and fp16 are both enabled");
  compute_dtype_ = config_.bf16           ? torch::kBFloat16
                   : config_.fp16.enabled ? torch::kHalf
                                          : torch::kFloat32;

  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    ZOFF_CHECK_ARG(item.value().scalar_type() == torch::kFloat32, "parameter ", item.key(), " is ",
                   item.value().scalar_type(),
                   ": hand the engine an fp32 module (it makes the 16-bit copy itself)");
    named.emplace_back(item.key(), item.value());
    module_params_.push_back(item.value());
  }
  layout_ = std::make_unique<partition::FlatLayout>(named, comm_->size());
  shard_ = layout_->shard(comm_->rank());
  compute_device_ = module_params_.front().device();
  offload_device_ = offload_ ? torch::Device(torch::kCPU) : compute_device_;
  const bool stage0 = config_.zero.stage == 0;
  opt_offset_ = stage0 ? 0 : shard_.offset;
  const int64_t opt_numel = stage0 ? layout_->padded_numel() : shard_.size;

  if (compute_dtype_ == torch::kFloat32) {
    params_ = std::make_unique<partition::FlatBuffer>(*layout_, torch::kFloat32, compute_device_);
    params_->adopt_parameters(module_params_);
    // Every rank starts from rank 0's weights, whatever its own initialisation did.
    comm_->broadcast(params_->flat(), 0)->wait();
    auto region = params_->range(opt_offset_, opt_numel);
    if (offload_) {
      master_ = host_fp32_like(region, offload_device_, offload.pin_memory);
      master_owned_ = true;
    } else {
      master_ = region;  // fp32 on one device: the parameters are their own master
    }
  } else {
    // The fp32 values become the master; the module computes with a 16-bit copy.
    partition::FlatBuffer fp32(*layout_, torch::kFloat32, compute_device_);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < layout_->slots().size(); ++i) {
        fp32.view(i).copy_(module_params_[layout_->slots()[i].module_index]);
      }
    }
    comm_->broadcast(fp32.flat(), 0)->wait();
    master_ =
        host_fp32_like(fp32.range(opt_offset_, opt_numel), offload_device_, offload.pin_memory);
    master_owned_ = true;
    params_ = std::make_unique<partition::FlatBuffer>(*layout_, compute_dtype_, compute_device_);
    params_->adopt_parameters(module_params_);
    params_->flat().copy_(fp32.flat());  // rank 0's values, rounded to nearest even
    if (!compute_device_.is_cpu()) {
      // The optimizer runs on the host: its 16-bit copy-out lands here, then moves.
      auto opts = torch::TensorOptions().dtype(compute_dtype_).pinned_memory(offload.pin_memory);
      out16_ = torch::empty({opt_numel}, opts);
    }
  }

  GradReducerOptions ro;
  ro.mode = mode;
  ro.bucket_elems = config_.zero.reduce_bucket_size;
  ro.overlap = config_.zero.overlap_comm;
  ro.shard_device = offload_device_;
  ro.pin_memory = offload.pin_memory;
  reducer_ = std::make_unique<GradReducer>(*layout_, module_params_, comm_, ro);
  optimizer_ = optim::make_shard_optimizer(config_.optimizer, static_cast<size_t>(opt_numel),
                                           options_.optimizer_backend, options_.optimizer_threads);
  if (config_.fp16.enabled) scaler_ = std::make_unique<LossScaler>(config_.fp16);
  dpu_ = offload_ && offload.delayed_param_update;
  if (dpu_) {
    ZOFF_CHECK(master_owned_, "delayed parameter update needs an owned master copy");
    dpu_grads_ = torch::empty({opt_numel}, master_.options());
    dpu_out_ = torch::empty(
        {opt_numel}, torch::TensorOptions().dtype(
                         compute_dtype_ == torch::kFloat32 ? torch::kFloat32 : compute_dtype_));
  }
}

ZeroEngine::~ZeroEngine() {
  if (pending_update_.valid()) pending_update_.wait();
}

void ZeroEngine::launch_delayed_update(const torch::Tensor& grads, double lr) {
  // The update reads its own copy of the gradients (the reducer's buffer is refilled by
  // the next backward) and writes the new 16-bit values aside (the module reads the
  // current ones meanwhile). synchronize() brings them in.
  dpu_grads_.copy_(grads);
  pending_update_ = std::async(std::launch::async, [this, lr] {
    update_master(dpu_grads_, lr, dpu_out_);
    if (compute_dtype_ == torch::kFloat32) dpu_out_.copy_(master_);
  });
}

// One fused optimizer pass over the master shard; with 16-bit compute it also writes the
// rounded parameters into `out16` (numel 16-bit elements) in the same pass.
void ZeroEngine::update_master(const torch::Tensor& grads, double lr, const torch::Tensor& out16) {
  optim::CopyOut copy_out = optim::CopyOut::kNone;
  uint16_t* out = nullptr;
  if (compute_dtype_ != torch::kFloat32) {
    copy_out = compute_dtype_ == torch::kBFloat16 ? optim::CopyOut::kBf16 : optim::CopyOut::kFp16;
    out = reinterpret_cast<uint16_t*>(out16.data_ptr());
  }
  optimizer_->step(master_.data_ptr<float>(), grads.data_ptr<float>(), lr, copy_out, out);
}

void ZeroEngine::synchronize() {
  if (!pending_update_.valid()) return;
  torch::NoGradGuard no_grad;
  pending_update_.get();  // rethrows what the update threw
  params_->range(opt_offset_, master_.numel()).copy_(dpu_out_, /*non_blocking=*/true);
  if (config_.zero.stage > 0) all_gather_params();
}

void ZeroEngine::backward(const torch::Tensor& loss) {
  ZOFF_CHECK_ARG(loss.numel() == 1, "engine.backward: loss has ", loss.numel(),
                 " elements, expected a scalar");
  ZOFF_CHECK(
      micro_ < config_.gradient_accumulation_steps, "engine.backward called ", micro_ + 1,
      " times before step(); gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  const bool boundary = micro_ + 1 == config_.gradient_accumulation_steps;
  reducer_->begin_backward(boundary);
  try {
    // Micro-batch losses are means over their micro-batch; the step's gradient is their
    // mean over the accumulation (and, after reduction, over ranks).
    const double accum = static_cast<double>(config_.gradient_accumulation_steps);
    if (scaler_) {
      (loss * (scaler_->scale() / accum)).backward();
    } else {
      (loss / accum).backward();
    }
  } catch (...) {
    reducer_->end_backward();
    throw;
  }
  reducer_->end_backward();
  ++micro_;
}

bool ZeroEngine::any_overflow(const torch::Tensor& grads) {
  // Every rank sees a different shard: agree on the verdict so all skip together.
  auto flag = torch::isfinite(grads).all().logical_not().to(torch::kFloat64).reshape({1});
  if (comm_->size() > 1) comm_->all_reduce_sum(flag)->wait();
  return flag.item<double>() > 0.0;
}

StepStats ZeroEngine::step() {
  ZOFF_CHECK(
      micro_ == config_.gradient_accumulation_steps, "engine.step after ", micro_,
      " backward calls; gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  torch::NoGradGuard no_grad;
  StepStats stats;
  // The previous step's delayed update lands now: this step's gradients were computed on
  // the parameters before it, the next forward sees it.
  synchronize();
  auto grads = reducer_->reduced_grads();
  if (scaler_) {
    stats.loss_scale = scaler_->scale();
    if (any_overflow(grads)) {
      stats.skipped = true;
      stats.lr = config::lr_at(config_.scheduler, config_.optimizer.lr, applied_);
      stats.grad_norm = std::numeric_limits<double>::infinity();
      scaler_->update(/*overflow=*/true, step_ + 1);  // throws at the minimum scale
      reducer_->zero_grads();
      micro_ = 0;
      stats.step = ++step_;
      return stats;
    }
    grads.mul_(1.0 / (static_cast<double>(comm_->size()) * scaler_->scale()));
  } else if (comm_->size() > 1) {
    grads.div_(static_cast<double>(comm_->size()));
  }

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

  stats.lr = config::lr_at(config_.scheduler, config_.optimizer.lr, applied_);
  if (dpu_ && step_ >= config_.zero.offload_optimizer.dpu_warmup_steps) {
    launch_delayed_update(grads, stats.lr);
  } else {
    auto target = out16_.defined() ? out16_ : params_->range(opt_offset_, master_.numel());
    update_master(grads, stats.lr, target);
    write_compute_shard();
    if (config_.zero.stage > 0) all_gather_params();
  }
  if (scaler_) scaler_->update(/*overflow=*/false, step_ + 1);
  reducer_->zero_grads();
  micro_ = 0;
  ++applied_;
  stats.step = ++step_;
  return stats;
}

// Brings the updated master into the compute parameters where the fused copy-out did not.
void ZeroEngine::write_compute_shard() {
  auto region = params_->range(opt_offset_, master_.numel());
  if (compute_dtype_ == torch::kFloat32) {
    if (master_owned_) region.copy_(master_, /*non_blocking=*/true);
  } else if (out16_.defined()) {
    region.copy_(out16_, /*non_blocking=*/true);
  }
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
    auto input = flat.narrow(0, shard_.offset + start, n);
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

torch::Tensor ZeroEngine::master_shard() {
  ZOFF_CHECK(!pending_update_.valid(),
             "master_shard() during a delayed update: synchronize() first");
  return master_.narrow(0, shard_.offset - opt_offset_, shard_.size);
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngine::optimizer_state_shard() {
  ZOFF_CHECK(!pending_update_.valid(),
             "optimizer_state_shard() during a delayed update: synchronize() first");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  // Stage 0's optimizer spans the whole padded buffer: hand out this rank's range of it.
  const int64_t numel = static_cast<int64_t>(optimizer_->numel());
  for (auto& [name, ptr] : optimizer_->state_buffers()) {
    auto whole = torch::from_blob(ptr, {numel}, torch::kFloat32);
    out.emplace_back(name, whole.narrow(0, shard_.offset - opt_offset_, shard_.size));
  }
  return out;
}

void ZeroEngine::restore_from_shards(int64_t step, int64_t applied_steps) {
  torch::NoGradGuard no_grad;
  if (config_.zero.stage == 0 && comm_->size() > 1) {
    // Every rank of stage 0 holds the whole master and optimizer state: gather them.
    auto gather = [&](torch::Tensor whole) {
      auto mine = whole.narrow(0, shard_.offset, shard_.size).clone();
      comm_->all_gather(mine, whole)->wait();
    };
    const int64_t numel = static_cast<int64_t>(optimizer_->numel());
    for (auto& [name, ptr] : optimizer_->state_buffers()) {
      gather(torch::from_blob(ptr, {numel}, torch::kFloat32));
    }
    if (master_owned_) gather(master_);
  }
  if (compute_dtype_ == torch::kFloat32) {
    write_compute_shard();
  } else {
    params_->range(opt_offset_, master_.numel()).copy_(master_);
  }
  all_gather_params();
  ZOFF_CHECK(!pending_update_.valid(), "restore_from_shards during a delayed update");
  step_ = step;
  applied_ = applied_steps < 0 ? step : applied_steps;
  optimizer_->set_step_count(applied_);
}

MemoryStats ZeroEngine::memory() const {
  MemoryStats m;
  m.compute.params = params_->bytes();
  m.compute.grads = reducer_->full_grad_bytes();
  m.compute.buffers =
      reducer_->buffer_bytes() + (out16_.defined() ? static_cast<size_t>(out16_.numel()) * 2 : 0);
  TierBytes& tier = offload_ ? m.offload : m.compute;
  tier.grads += reducer_->shard_grad_bytes();
  tier.master = master_owned_ ? static_cast<size_t>(master_.numel()) * sizeof(float) : 0;
  tier.optim = optimizer_->state_bytes();
  return m;
}

}  // namespace zoff::engine
