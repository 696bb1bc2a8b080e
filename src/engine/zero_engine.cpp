// ZeroEngine: setup of units, precision and tiers; backward; the step and its publication.
#include "zoff/engine/zero_engine.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "zoff/config/lr_schedule.h"
#include "zoff/core/error.h"
#include "zoff/core/heap_policy.h"
#include "zoff/core/process_memory.h"
#include "zoff/engine/grad_stats.h"
#include "zoff/optim/gradient_kernels.h"
#include "zoff/placement/store_tier.h"

namespace zoff::engine {
namespace {

using Clock = std::chrono::steady_clock;

GradMode grad_mode_for_stage(int stage) {
  switch (stage) {
    case 0:
      return GradMode::kAllReduce;
    case 1:
      return GradMode::kReduceScatterAtBoundary;
    default:
      return GradMode::kReduceScatterEveryMicroBatch;
  }
}

torch::Tensor fp32_buffer(int64_t numel, torch::Device where, bool pin) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(where);
  if (pin && where.is_cpu() && torch::cuda::is_available()) opts = opts.pinned_memory(true);
  return torch::zeros({numel}, opts);
}

// Every parameter and buffer on one device, the compute device (the CPU when every
// trainable parameter is a deferred placeholder); a module spread over several is refused
// in one line, naming the first tensor elsewhere.
torch::Device module_device(const UnitPlan& plan) {
  std::optional<std::pair<std::string, torch::Device>> first;
  for (const auto* group : {&plan.trainable, &plan.frozen, &plan.buffers}) {
    for (const auto& [name, t] : *group) {
      if (unit::is_deferred(t)) continue;  // a placeholder has no storage anywhere
      if (!first) first.emplace(name, t.device());
      ZOFF_CHECK_ARG(t.device() == first->second, "engine: ", name, " is on ", t.device(), " but ",
                     first->first, " on ", first->second, ": the module must be on one device");
    }
  }
  return first ? first->second : torch::Device(torch::kCPU);
}

}  // namespace

ZeroEngine::ZeroEngine(std::shared_ptr<torch::nn::Module> module, config::Config config,
                       dist::CommPtr comm, EngineOptions options)
    : module_(std::move(module)),
      config_(std::move(config)),
      comm_(std::move(comm)),
      options_(options) {
  ZOFF_CHECK_ARG(module_ != nullptr, "engine: no module");
  // A library user gets the config's warnings (an unknown key: a typo) too; the CLI prints
  // them itself and hands over a config without them.
  if (comm_->rank() == 0) {
    for (const auto& w : config_.warnings) std::fprintf(stderr, "zoff: warning: %s\n", w.c_str());
  }
  // The rules that need no module first: a bad config fails before the model is read.
  placement::PlacementContext early;
  early.world = comm_->size();
  placement_ = placement::resolve(config_, early);
  plan_ = plan_units(*module_, options_.unit_modules);
  ZOFF_CHECK_ARG(!plan_.trainable.empty(), "the module has no trainable parameters");
  compute_device_ = module_device(plan_);
  if (on_device()) check_device();
  transfer_ = make_device_transfer(compute_device_);
  check_deferred();
  deferred_ = std::any_of(plan_.trainable.begin(), plan_.trainable.end(),
                          [](const auto& item) { return unit::is_deferred(item.second); });
  for (auto& [name, t] : plan_.trainable) {
    ZOFF_CHECK_ARG(t.scalar_type() == torch::kFloat32, "parameter ", name, " is ", t.scalar_type(),
                   ": hand the engine an fp32 module (it makes the 16-bit copy itself)");
    trainable_.push_back(t);
  }
  layout_ = std::make_unique<partition::ModelLayout>(plan_.trainable, plan_.units, comm_->size(),
                                                     stage() >= 1);
  shard_ = {comm_->rank() * layout_->shard_size(), layout_->shard_size()};
  resolve_placement();
  offload_device_ = placement_.offloaded() ? torch::Device(torch::kCPU) : compute_device_;
  setup_buffers();
  load_unit_values();
  replicated_ =
      std::make_unique<ReplicatedStates>(plan_.frozen, plan_.buffers, comm_, compute_dtype_);
  replicated_->broadcast_from_rank0();
  setup_reducer();
  if (placement_.precision == placement::Precision::kFp16) {
    scaler_ = std::make_unique<LossScaler>(config_.fp16);
  }
  setup_delayed_update();
  if (gatherer_) unit::install_hooks(*module_, gatherer_.get());
}

ZeroEngine::~ZeroEngine() {
  if (gatherer_) unit::remove_hooks(*module_);
  if (pending_update_.valid()) pending_update_.wait();
  if (overlapping_) abandon_overlapped_step();
  // Their reads and writes land in the nvme tiers' regions: they go before the tiers.
  gatherer_.reset();
  store_.reset();
}

// The placement with what only the module tells: the compute device, this rank's shard (for
// offload_optimizer.gradients = auto) and the memory available now.
void ZeroEngine::resolve_placement() {
  placement::PlacementContext ctx;
  ctx.world = comm_->size();
  ctx.shard_elems = layout_->shard_size();
  ctx.available_bytes = available_memory_bytes();
  ctx.compute_on_device = on_device();
  ctx.torch_optimizer = options_.optimizer_backend == optim::OptimizerBackend::kTorch;
  placement_ = placement::resolve(config_, ctx, /*announce=*/true);
  compute_dtype_ = placement_.precision == placement::Precision::kBf16   ? torch::kBFloat16
                   : placement_.precision == placement::Precision::kFp16 ? torch::kHalf
                                                                         : torch::kFloat32;
  // With the parameters on disk peak RSS is what the run is about: units' buffers go back
  // to the kernel when released. With every model state in memory the step's speed is:
  // freed activations stay in the heap for the next step (heap_policy.h). A run with only
  // the optimizer on disk keeps glibc's own policy.
  if (placement_.params_on_disk()) {
    return_large_frees_to_kernel();
  } else if (!placement_.optimizer_on_disk()) {
    keep_freed_memory_for_reuse();
  }
}

// A module on an accelerator: ZeRO-Offload's GPU path, stages 1 and 2 with the optimizer
// offloaded (placement::resolve checks those). The master, the optimizer states and the
// gradient shard live in host memory or on NVMe and the CPU optimizer updates them; the
// device holds the 16-bit parameters, the activations and each gradient until it is copied
// out. The collectives run over the host transports (Gloo, shared memory) on host buffers.
void ZeroEngine::check_device() const {
  ZOFF_CHECK_ARG(compute_device_.is_cuda() || compute_device_.is_cpu(), "engine: the module is on ",
                 compute_device_.str(),
                 ": zoff computes on the CPU or a CUDA GPU; move the module there");
}

// Allocates the compute parameters and the fp32 master in their tiers (values come next).
void ZeroEngine::setup_buffers() {
  const bool fp32 = compute_dtype_ == torch::kFloat32;
  if (stage() <= 2) setup_params();
  // One copy per host in 16 bits, the optimizer's master in memory, no delayed update: the
  // fused pass writes this rank's pieces of the copy itself, and no 16-bit shard is kept.
  params_in_step_ = whole_ && whole_->shared() && !fp32 && !placement_.optimizer_on_disk() &&
                    !placement_.delayed_update;
  if (params_in_step_) own_pieces_ = whole_->own_pieces();
  if (stage() == 0) {
    master_ = placement_.master_is_params
                  ? whole_->flat()
                  : fp32_buffer(layout_->padded_numel(), offload_device_, placement_.pin_memory);
    setup_memory_store();
    return;
  }
  if (placement_.optimizer_on_disk()) {
    setup_tiered();  // the master lives in the tier; the compute shard is its own buffer
  } else {
    master_ = fp32_buffer(layout_->shard_size(), offload_device_, placement_.pin_memory);
    setup_memory_store();
  }
  // On an accelerator the shard the optimizer writes stays in host memory: the publish
  // gathers it there and copies the whole parameters to the device once.
  const torch::Device shard_home = on_device() ? torch::Device(torch::kCPU) : compute_device_;
  if (master_.defined() && fp32 && offload_device_ == shard_home) {
    // The optimizer updates the shard the model's copy comes from (at stage 3 the pieces
    // the model gathers: placement_.master_is_params).
    shard_space_ = master_;
  } else if (!placement_.params_on_disk() && !params_in_step_) {
    shard_space_ = torch::zeros(
        {layout_->shard_size()},
        on_device() ? host_buffer_options(compute_dtype_)
                    : torch::TensorOptions().dtype(compute_dtype_).device(compute_device_));
  }
  if (stage() == 3) {
    UnitGathererOptions go;
    go.prefetch_elems = config_.zero.stage3_prefetch_bucket_size;
    go.max_live_elems = config_.zero.stage3_max_live_parameters;
    go.persistence_threshold = config_.zero.stage3_param_persistence_threshold;
    go.start_released = deferred_;
    gatherer_ = std::make_unique<UnitGatherer>(*layout_, plan_.module_units, make_unit_pieces(),
                                               compute_dtype_, comm_, go);
  }
}

// Stages 0-2's whole compute parameters (whole_params.h).
void ZeroEngine::setup_params() {
  WholeParamsOptions wo;
  wo.dtype = compute_dtype_;
  wo.device = compute_device_;
  wo.per_host = placement_.params_per_host;
  wo.on_device = on_device();
  if (on_device()) wo.host_options = host_buffer_options(compute_dtype_);
  wo.transfer = transfer_.get();
  whole_ = std::make_unique<WholeParams>(*layout_, comm_, wo);
}

// Host buffers the device copies to and from: page-locked with offload_optimizer.pin_memory
// (asynchronous copies). LibTorch's pinned allocator rounds every block up to a power of
// two, so for the largest models pinning can cost up to twice the bytes: the key decides.
torch::TensorOptions ZeroEngine::host_buffer_options(torch::ScalarType dtype) const {
  if (placement_.pin_memory) return transfer_->host_options(dtype);
  return torch::TensorOptions().dtype(dtype);
}

// The optimizer's disk store and the streamed optimizer over it: the fp32 master and
// optimizer states of this rank's shard space live in its files.
void ZeroEngine::setup_tiered() {
  const auto& offload = config_.zero.offload_optimizer;
  SubGroupOptions sub_groups;
  sub_groups.sub_group_elems = config_.zero.sub_group_size;
  sub_groups.buffer_count = offload.buffer_count;
  sub_groups.grads_in_tier = placement_.grads == placement::GradStore::kDisk;
  sub_groups.grads_streamed = placement_.grads == placement::GradStore::kStreamed;
  sub_groups.stream_buffers = offload.stream_buffers;
  store_ = make_tiered_master_store(
      placement_.optimizer, "zoff_rank" + std::to_string(comm_->rank()), config_,
      options_.optimizer_threads, static_cast<size_t>(layout_->shard_size()), sub_groups);
}

// The master in memory (master_) and the optimizer over it. Stage 0's whole-buffer int8
// states restart their blocks at every rank's shard: each rank's slice is then
// self-contained, checkpointed like a stage-1 rank's own states.
void ZeroEngine::setup_memory_store() {
  store_ = make_memory_master_store(master_, config_.optimizer, options_.optimizer_backend,
                                    options_.optimizer_threads, static_cast<size_t>(shard_.size));
}

// A reduced bucket's shard range, into the gradient region: the last micro-batch also
// averages over ranks there (as step() would in memory) and adds to this rank's squares.
void ZeroEngine::on_grad_piece(int64_t offset, const torch::Tensor& piece, bool first) {
  const bool boundary = micro_ + 1 == config_.gradient_accumulation_steps;
  const int divide_by = boundary ? comm_->size() : 1;
  const double squares = store_->take_grads(static_cast<size_t>(offset), piece.data_ptr<float>(),
                                            static_cast<size_t>(piece.numel()), first, divide_by);
  if (boundary) grad_squares_ += squares;
}

// Stage 3: this rank's unit pieces, in the shard space in memory or, with offload_param
// nvme, in a region of a second tier under offload_param.nvme_path, which the optimizer
// writes each step's new pieces into.
std::unique_ptr<UnitPieces> ZeroEngine::make_unit_pieces() {
  if (!placement_.params_on_disk()) return make_host_unit_pieces(*layout_, shard_space_);
  param_tier_ =
      placement::make_tier(placement_.params, "zoff_params_rank" + std::to_string(comm_->rank()),
                           placement::aio_options(config_.aio));
  const size_t element_bytes = c10::elementSize(compute_dtype_);
  param_region_ =
      param_tier_->allocate("params", static_cast<size_t>(layout_->shard_size()) * element_bytes);
  store_->tiered()->set_output_region(param_region_.get(), element_bytes);
  return make_tier_unit_pieces(*layout_, *param_region_, param_tier_->alignment(), compute_dtype_,
                               config_.zero.offload_param.max_in_cpu);
}

// One unit's values from the module's parameters, fp32, padded, in the unit's layout.
torch::Tensor ZeroEngine::unit_values_fp32(size_t u) const {
  const auto& unit = layout_->units()[u];
  // In host memory whatever the compute device: the broadcast and the master are there.
  auto values = torch::zeros({unit.padded_numel}, torch::kFloat32);
  for (size_t s : unit.slots) {
    const auto& slot = layout_->slots()[s];
    auto dst = values.narrow(0, slot.offset - unit.offset, slot.numel);
    const torch::Tensor& param = trainable_[slot.module_index];
    if (unit::is_deferred(param)) {
      options_.param_init(plan_.trainable[slot.module_index].first, dst.view(param.sizes()));
    } else {
      dst.copy_(param.detach().reshape({-1}));
    }
  }
  return values;
}

// Deferred trainable parameters need options.param_init; frozen parameters and buffers
// are kept whole on every rank from the module's own values, so they cannot be deferred.
void ZeroEngine::check_deferred() const {
  for (const auto& [name, t] : plan_.trainable) {
    ZOFF_CHECK_ARG(!unit::is_deferred(t) || options_.param_init, "engine: parameter ", name,
                   " has no values (deferred by unit::defer_parameters) and "
                   "EngineOptions::param_init is not set");
  }
  for (const auto* group : {&plan_.frozen, &plan_.buffers}) {
    for (const auto& [name, t] : *group) {
      ZOFF_CHECK_ARG(!unit::is_deferred(t), "engine: ", name,
                     " is frozen (or a buffer) and deferred: only trainable parameters can "
                     "be deferred; build it with its values");
    }
  }
}

// Every rank starts from rank 0's weights, whatever its own initialisation did. Unit by
// unit, so the fp32 staging never exceeds one unit: rank 0's values go to the master
// (its whole buffer at stage 0, this rank's pieces at stages 1-3) and, rounded to the
// compute dtype, to the compute parameters; the module's parameters then become views.
void ZeroEngine::load_unit_values() {
  torch::NoGradGuard no_grad;
  const int64_t rank = comm_->rank();
  // In buffer order: shard offsets increase along it, as the nvme tier's appends need.
  for (size_t u : layout_->buffer_order()) {
    const auto& unit = layout_->units()[u];
    auto values = unit_values_fp32(u);
    comm_->broadcast(values, 0)->wait();
    // This rank's piece of the unit (stages 1-3; empty at stage 0, which is not sharded).
    const auto mine = values.narrow(0, rank * unit.shard_size, unit.shard_size);
    if (stage() > 0) {
      store_->fill(static_cast<size_t>(unit.shard_offset), mine.contiguous().data_ptr<float>(),
                   static_cast<size_t>(unit.shard_size));
    } else if (!placement_.master_is_params) {
      store_->fill(static_cast<size_t>(unit.offset), values.data_ptr<float>(),
                   static_cast<size_t>(unit.padded_numel));
    }
    if (gatherer_) {
      gatherer_->fill_unit(u, values.to(compute_dtype_));
    } else {
      whole_->fill_unit(u, values, mine);
      if (stage() >= 1 && shard_space_.defined() && !shard_space_.is_same(master_)) {
        shard_space_.narrow(0, unit.shard_offset, unit.shard_size).copy_(mine);
      }
    }
  }
  store_->finish_fill();
  if (gatherer_) gatherer_->finish_fill();
  if (whole_) whole_->bind(trainable_);
  if (gatherer_) gatherer_->bind_parameters(trainable_);
}

void ZeroEngine::setup_reducer() {
  GradReducerOptions ro;
  ro.mode = grad_mode_for_stage(stage());
  ro.bucket_elems = config_.zero.reduce_bucket_size;
  ro.unit_buckets = stage() == 3;
  ro.overlap = config_.zero.overlap_comm;
  ro.shard_device = offload_device_;
  ro.pin_memory = placement_.pin_memory;
  ro.stage_on_host = on_device();
  ro.transfer = transfer_.get();
  ro.staging_dtype = compute_dtype_;
  if (gatherer_) {
    UnitGatherer* g = gatherer_.get();
    ro.on_unit_done = [g](size_t u) { g->unit_backward_done(u); };
  }
  if (!placement_.grads_in_memory()) {
    ro.shard_sink = [this](int64_t offset, const torch::Tensor& piece, bool first) {
      on_grad_piece(offset, piece, first);
    };
  }
  if (placement_.overlap_step) {
    ro.on_shard_final = [this](int64_t offset, int64_t size) { on_shard_final(offset, size); };
  }
  reducer_ = std::make_unique<GradReducer>(*layout_, trainable_, comm_, ro);
}

void ZeroEngine::setup_delayed_update() {
  if (!placement_.delayed_update) return;
  ZOFF_CHECK(!placement_.master_is_params, "delayed parameter update needs an owned master copy");
  dpu_grads_ = torch::empty({master_.numel()}, master_.options());
  dpu_out_ = torch::empty({master_.numel()}, torch::TensorOptions().dtype(compute_dtype_));
}

torch::Tensor ZeroEngine::flat_params() const { return whole_ ? whole_->flat() : shard_space_; }

void ZeroEngine::backward(const torch::Tensor& loss) {
  ZOFF_CHECK_ARG(loss.numel() == 1, "engine.backward: loss has ", loss.numel(),
                 " elements, expected a scalar");
  ZOFF_CHECK(
      micro_ < config_.gradient_accumulation_steps, "engine.backward called ", micro_ + 1,
      " times before step(); gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  ZOFF_CHECK(tier_damaged_.empty(), tier_damaged_);
  const auto start = Clock::now();
  const bool boundary = micro_ + 1 == config_.gradient_accumulation_steps;
  if (micro_ == 0) meter_.reset();
  if (boundary && placement_.overlap_step) begin_overlapped_step();
  meter_.sample_before_backward();
  reducer_->begin_backward(boundary);
  if (gatherer_) gatherer_->begin_backward();
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
    reducer_->abort_backward();
    if (gatherer_) gatherer_->end_backward();
    if (overlapping_) abandon_overlapped_step();
    throw;
  }
  {
    RECORD_USER_SCOPE("zoff::end_backward");  // flushes the last buckets
    const auto reduce_start = Clock::now();
    reducer_->end_backward();
    times_.backward_reduce_ms += ms_since(reduce_start);
  }
  if (gatherer_) gatherer_->end_backward();
  meter_.mark_baseline();
  ++micro_;
  times_.backward_ms += ms_since(start);
}

// fp16: an overflow skips the step on every rank (and halves the scale); else unscales.
bool ZeroEngine::skip_overflowed_step(const torch::Tensor& grads, StepStats* stats) {
  stats->loss_scale = scaler_->scale();
  if (!any_rank_overflowed(*comm_, grads)) {
    grads.mul_(1.0 / (static_cast<double>(comm_->size()) * scaler_->scale()));
    return false;
  }
  stats->skipped = true;
  stats->lr = config::lr_at(config_.scheduler, config_.optimizer.lr, applied_);
  stats->grad_norm = std::numeric_limits<double>::infinity();
  scaler_->update(/*overflow=*/true, step_ + 1);  // throws at the minimum scale
  reducer_->zero_grads();
  micro_ = 0;
  stats->step = ++step_;
  return true;
}

void ZeroEngine::clip_and_measure(const torch::Tensor& grads, std::optional<double> squares,
                                  StepStats* stats) {
  // Global gradient norm: the shards are disjoint, so the squares add up across ranks.
  // `squares` comes from the pass that averaged the gradients when there was one; gradients
  // in the tier were summed bucket by bucket as they were written (the same value up to
  // the rounding of the sum's order).
  if (!squares) {
    squares = !placement_.grads_in_memory()
                  ? grad_squares_
                  : optim::sum_squares(gradient_span(grads), static_cast<size_t>(grads.numel()));
  }
  stats->grad_norm = std::sqrt(stage() > 0 ? sum_in_rank_order(*comm_, *squares) : *squares);
  if (config_.gradient_clipping > 0.0) {
    const double coef = clip_coefficient(config_.gradient_clipping, stats->grad_norm);
    if (coef < 1.0) {
      if (!placement_.grads_in_memory()) {
        store_->set_grad_scale(coef);  // applied as each sub-group's gradients are read
      } else {
        grads.mul_(coef);
      }
      stats->clipped = true;
    }
  }
}

StepStats ZeroEngine::step() {
  const auto start = Clock::now();
  // The step's parts count from here: a synchronize() before it (an evaluation's, a
  // checkpoint load's) is not part of this step; the backward calls before it are.
  times_.grad_norm_ms = times_.optimizer_ms = times_.allgather_ms = 0.0;
  StepStats stats = apply_step();
  times_.step_ms = ms_since(start);
  stats.times = times_;
  times_ = StepTimes{};
  return stats;
}

StepStats ZeroEngine::apply_step() {
  ZOFF_CHECK(
      micro_ == config_.gradient_accumulation_steps, "engine.step after ", micro_,
      " backward calls; gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  torch::NoGradGuard no_grad;
  StepStats stats;
  // The previous step's delayed update lands now: this step's gradients were computed on
  // the parameters before it, the next forward sees it.
  synchronize();
  ZOFF_CHECK(tier_damaged_.empty(), tier_damaged_);
  torch::Tensor grads;
  {
    RECORD_USER_SCOPE("zoff::wait_reduced_grads");  // the last buckets' reduce-scatter
    grads = reducer_->reduced_grads();
  }
  if (scaler_ && skip_overflowed_step(grads, &stats)) return stats;
  {
    RECORD_USER_SCOPE("zoff::grad_norm_and_clip");
    const auto norm_start = Clock::now();
    std::optional<double> squares;
    if (!scaler_ && comm_->size() > 1 && !overlapping_ && !!placement_.grads_in_memory()) {
      // The average over ranks and the norm's squares in one pass. Overlapped: averaged
      // range by range; gradients in the tier: as they were written; fp16: by the unscale.
      squares =
          optim::divide_and_sum_squares(gradient_span(grads), static_cast<size_t>(grads.numel()),
                                        static_cast<float>(comm_->size()));
    }
    clip_and_measure(grads, squares, &stats);
    times_.grad_norm_ms += ms_since(norm_start);
  }
  stats.lr = config::lr_at(config_.scheduler, config_.optimizer.lr, applied_);
  const auto update_start = Clock::now();
  if (placement_.delayed_update && step_ >= config_.zero.offload_optimizer.dpu_warmup_steps) {
    launch_delayed_update(grads, stats.lr);
    times_.optimizer_ms += ms_since(update_start);
  } else if (params_in_step_) {
    update_shared_params(grads, stats.lr);
  } else {
    {
      RECORD_USER_SCOPE("zoff::optimizer_step");
      update_master(grads, stats.lr, copy_out_target());
      times_.optimizer_ms += ms_since(update_start);
    }
    RECORD_USER_SCOPE("zoff::publish_params");  // stages 1-2: the all-gather
    publish_params();
  }
  if (scaler_) scaler_->update(/*overflow=*/false, step_ + 1);
  finish_step();
  ++applied_;
  stats.step = ++step_;
  return stats;
}

void ZeroEngine::finish_step() {
  grad_squares_ = 0;
  replicated_->broadcast_buffers();
  reducer_->zero_grads();
  micro_ = 0;
  meter_.mark_baseline();
}

// The compute-dtype tensor over the optimizer's elements: the whole flat parameters at
// stage 0, this rank's shard space at stages 1-3.
torch::Tensor ZeroEngine::optimizer_output() const {
  return stage() == 0 ? whole_->flat() : shard_space_;
}

// Where the fused pass writes the 16-bit copy of the updated master.
torch::Tensor ZeroEngine::copy_out_target() const {
  if (compute_dtype_ == torch::kFloat32) return torch::Tensor();
  return optimizer_output();
}

// The 16-bit copy the fused pass writes of the updated master: the compute dtype's, none
// for fp32 compute.
optim::CopyOut ZeroEngine::compute_copy_out() const {
  if (compute_dtype_ == torch::kFloat32) return optim::CopyOut::kNone;
  return compute_dtype_ == torch::kBFloat16 ? optim::CopyOut::kBf16 : optim::CopyOut::kFp16;
}

// One fused optimizer pass over the master; with 16-bit compute it also writes the
// rounded parameters into `out16` (master_.numel() 16-bit elements) in the same pass.
void ZeroEngine::update_master(const torch::Tensor& grads, double lr, const torch::Tensor& out16) {
  if (overlapping_) {
    overlapping_ = false;
    store_->finish_step();  // began with backward, at the same lr
    return;
  }
  StepOutput out;
  if (placement_.optimizer_on_disk()) {
    out = disk_step_output();
  } else {
    out.copy_out = compute_copy_out();
    if (out.copy_out != optim::CopyOut::kNone && out16.defined()) {
      out.out16 = reinterpret_cast<uint16_t*>(out16.data_ptr());
    }
  }
  store_->step(grads.defined() ? grads.data_ptr<float>() : nullptr, lr, out);
}

// Note: the overlapped step. The optimizer's worker thread starts the step before the last
// backward of the accumulation; the reducer reports each bucket's shard range as soon as
// its sum is final (on_shard_final), the range is averaged over ranks there (the same
// division step() would do, element by element), and every sub-group whose elements are
// all final is read, updated and written while backward computes the rest. step() then
// measures the norm (read only) and waits for the sub-groups left. Exact: same kernels,
// same values, same lr (the schedule's value for this step is known before backward).
void ZeroEngine::begin_overlapped_step() {
  const double lr = config::lr_at(config_.scheduler, config_.optimizer.lr, applied_);
  const auto grads = reducer_->reduced_grads();  // undefined: the gradients are in the tier
  store_->begin_step(grads.defined() ? grads.data_ptr<float>() : nullptr, lr, disk_step_output());
  overlapping_ = true;
}

// Where the disk step's compute-dtype copy goes: the shard space in memory (fp32: the new
// master itself, since the master is not in memory), or nowhere when the parameter pieces
// live on disk too (the optimizer writes them there itself).
StepOutput ZeroEngine::disk_step_output() {
  StepOutput out;
  out.copy_out = compute_copy_out();
  if (!shard_space_.defined()) return out;
  if (compute_dtype_ == torch::kFloat32) {
    out.out32 = shard_space_.data_ptr<float>();
  } else {
    out.out16 = reinterpret_cast<uint16_t*>(shard_space_.data_ptr());
  }
  return out;
}

void ZeroEngine::on_shard_final(int64_t offset, int64_t size) {
  // Streamed gradients: accumulate_grads submitted each complete sub-group itself.
  if (!overlapping_ || size == 0 || (placement_.grads == placement::GradStore::kStreamed)) return;
  torch::NoGradGuard no_grad;
  if (comm_->size() > 1 && placement_.grads_in_memory()) {  // in the tier: divided as written
    reducer_->reduced_grads().narrow(0, offset, size).div_(static_cast<double>(comm_->size()));
  }
  store_->grads_final(static_cast<size_t>(offset), static_cast<size_t>(size));
}

// A backward that failed after sub-groups were updated: finish nothing more, and refuse to
// go on, since part of the tier holds this step's values and part the last step's.
void ZeroEngine::abandon_overlapped_step() {
  overlapping_ = false;
  try {
    store_->abandon_step();
  } catch (...) {
  }
  tier_damaged_ =
      "the nvme tier holds a half-applied step (a backward failed while the step overlapped "
      "it): resume from the last checkpoint";
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

void ZeroEngine::synchronize() {
  if (!pending_update_.valid()) return;
  torch::NoGradGuard no_grad;
  const auto wait_start = Clock::now();
  pending_update_.get();                        // rethrows what the update threw
  times_.optimizer_ms += ms_since(wait_start);  // what the delayed update did not hide
  optimizer_output().copy_(dpu_out_);
  publish_params();
}

void ZeroEngine::publish_params() {
  const auto start = Clock::now();
  publish_shard();
  times_.allgather_ms += ms_since(start);
}

// Brings this rank's updated shard into the parameters the model computes with.
void ZeroEngine::publish_shard() {
  torch::NoGradGuard no_grad;
  const bool fp32 = compute_dtype_ == torch::kFloat32;
  if (stage() == 0) {
    if (fp32 && !placement_.master_is_params) whole_->flat().copy_(master_, /*non_blocking=*/true);
    return;
  }
  if (fp32 && master_.defined() && !shard_space_.is_same(master_)) {
    shard_space_.copy_(master_, /*non_blocking=*/true);
  }
  if (gatherer_) {
    gatherer_->refresh_whole_units();
  } else {
    // Without a 16-bit shard (params_in_step_): rounded from the master, as the fused pass
    // rounds (nearest even).
    whole_->publish(params_in_step_ ? master_ : shard_space_);
  }
}

// Stages 1-2 with the fused pass writing into the one copy per host: between the same two
// barriers as WholeParams::publish, the optimizer writes this rank's pieces itself.
void ZeroEngine::update_shared_params(const torch::Tensor& grads, double lr) {
  const auto wait_start = Clock::now();
  comm_->barrier();  // no peer reads the parameters any more
  times_.allgather_ms += ms_since(wait_start);
  const auto update_start = Clock::now();
  {
    RECORD_USER_SCOPE("zoff::optimizer_step");
    store_->step_scattered(grads.data_ptr<float>(), lr, compute_copy_out(), own_pieces_);
  }
  times_.optimizer_ms += ms_since(update_start);
  RECORD_USER_SCOPE("zoff::publish_params");
  const auto publish_start = Clock::now();
  comm_->barrier();  // every rank's pieces are written
  times_.allgather_ms += ms_since(publish_start);
}

MemoryStats ZeroEngine::memory() const {
  MemoryStats m;
  const size_t shard16 =
      shard_space_.defined() ? static_cast<size_t>(shard_space_.nbytes()) : size_t{0};
  const bool shard_is_master = shard_space_.defined() && shard_space_.is_same(master_);
  if (whole_) {
    m.compute.params = whole_->bytes();
    if (whole_->shared()) {  // one copy per host: this rank's share of it
      m.host_shared_params = whole_->bytes();
      m.compute.params = whole_->bytes() / static_cast<size_t>(comm_->size());
    }
    // Stages 1, 2: the shard the optimizer writes, which the publish sends or copies.
    if (shard_space_.defined() && !shard_is_master) {
      (on_device() ? m.offload.buffers : m.compute.buffers) += shard16;
    }
    m.offload.buffers += whole_->host_bytes();
  } else {
    m.compute.params = gatherer_->pieces().resident_bytes() + gatherer_->whole_bytes();
    if (param_region_) m.nvme.params = param_region_->bytes();
    m.live_unit_bytes = gatherer_->whole_bytes();
    m.peak_live_bytes =
        static_cast<size_t>(gatherer_->peak_live_elems()) * c10::elementSize(compute_dtype_);
  }
  m.compute.params += replicated_->frozen_bytes();
  m.compute.grads = reducer_->full_grad_bytes();
  m.compute.buffers += reducer_->buffer_bytes() + replicated_->buffer_bytes();
  TierBytes& tier = placement_.offloaded() ? m.offload : m.compute;
  tier.grads += reducer_->shard_grad_bytes();
  const StoreBytes store = store_->bytes();
  m.nvme.master = store.disk_master;
  m.nvme.optim = store.disk_states;
  m.nvme.grads = store.disk_grads;
  tier.buffers += store.host_buffers;  // a disk store's sub-group staging
  // With placement_.master_is_params the master is counted as the parameters.
  tier.master = placement_.master_is_params ? 0 : store.memory_master;
  tier.optim = store.memory_states;
  m.activations = meter_.kept_bytes();
  return m;
}

}  // namespace zoff::engine
