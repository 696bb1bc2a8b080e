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
#include "zoff/engine/module_values.h"
#include "zoff/optim/gradient_kernels.h"
#include "zoff/optim/split_master.h"
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
  check_deferred(plan_, static_cast<bool>(options_.param_init));
  for (auto& [name, t] : plan_.trainable) {
    ZOFF_CHECK_ARG(t.scalar_type() == torch::kFloat32, "parameter ", name, " is ", t.scalar_type(),
                   ": hand the engine an fp32 module (it makes the 16-bit copy itself)");
    trainable_.push_back(t);
  }
  layout_ = std::make_unique<partition::ModelLayout>(plan_.trainable, plan_.units, comm_->size(),
                                                     stage() >= 1);
  shard_ = {comm_->rank() * layout_->shard_size(), layout_->shard_size()};
  resolve_placement();
  setup_states();
  load_unit_values();
  replicated_ =
      std::make_unique<ReplicatedStates>(plan_.frozen, plan_.buffers, comm_, compute_dtype_);
  replicated_->broadcast_from_rank0();
  setup_reducer();
  if (placement_.precision == placement::Precision::kFp16) {
    scaler_ = std::make_unique<LossScaler>(config_.fp16);
  }
  if (placement_.delayed_update) {
    ZOFF_CHECK(!placement_.master_is_params, "delayed parameter update needs an owned master copy");
    delayed_ = std::make_unique<DelayedUpdate>(store_->master(), compute_dtype_);
  }
}

ZeroEngine::~ZeroEngine() {
  delayed_.reset();  // waits for an update still running
  if (sink_) sink_->abort_backward();
  // The store's writes land in stage 3's parameter tier, which params_ owns: it goes first.
  store_.reset();
  params_.reset();
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
  // Every step frees and allocates the same activations: they stay in the heap for the next
  // step, and so do blocks too large for it, in zoff's CPU allocator (heap_policy.h;
  // Placement::keep_large_blocks). What must leave RSS once freed (stage 3's units, the
  // tiers' buffers) is in mappings of its own (core/own_mapping.h). With the parameters on
  // disk in a run short of memory peak RSS is what the run is about: only blocks below 4 MiB
  // stay in the heap and its free top goes back at once (what each costs: heap_policy.h;
  // placement::rss_first_heap when).
  if (placement_.rss_first_heap) {
    keep_freed_memory_for_reuse(kHeapRssFirstMmapBytes, kHeapMinTrimBytes,
                                /*keep_large_blocks=*/false);
  } else {
    keep_freed_memory_for_reuse(kHeapReuseMmapBytes, kHeapReuseTrimBytes,
                                placement_.keep_large_blocks());
  }
}

// A module on an accelerator: ZeRO-Offload's GPU path, stages 1-3 with the optimizer
// offloaded (placement::resolve checks those). The master, the optimizer states and the
// gradient shard live in host memory or on NVMe and the CPU optimizer updates them; the
// device holds the 16-bit parameters (at stage 3 only the units whole now, each gathered in
// host memory and copied over), the activations and each gradient until it is copied out. The
// collectives run over the host transports (Gloo, shared memory) on host buffers.
void ZeroEngine::check_device() const {
  ZOFF_CHECK_ARG(compute_device_.is_cuda() || compute_device_.is_cpu(), "engine: the module is on ",
                 compute_device_.str(),
                 ": zoff computes on the CPU or a CUDA GPU; move the module there");
}

// What the compute parameters are made from (compute_params.h).
ComputeParamsSetup ZeroEngine::compute_params_setup() const {
  ComputeParamsSetup cs;
  cs.module = module_.get();
  cs.layout = layout_.get();
  cs.comm = comm_;
  cs.placement = placement_;
  cs.config = &config_;
  cs.dtype = compute_dtype_;
  cs.device = compute_device_;
  cs.on_device = on_device();
  // Host buffers the device copies to and from: page-locked with offload_optimizer.pin_memory
  // (asynchronous copies). LibTorch's pinned allocator rounds every block up to a power of
  // two, so for the largest models pinning can cost up to twice the bytes: the key decides.
  cs.host_options = placement_.pin_memory ? transfer_->host_options(compute_dtype_)
                                          : torch::TensorOptions().dtype(compute_dtype_);
  cs.transfer = transfer_.get();
  cs.module_units = plan_.module_units;
  cs.start_released = any_deferred(plan_);
  return cs;
}

// The master store (the fp32 master and the optimizer states: in a host tier stepped in
// place, or in a disk tier streamed in sub-groups) and the compute parameters the step
// writes into. Stage 0's master is the whole buffer (the fp32 parameters themselves when
// they are the master), stages 1-3's this rank's shard space; stage 0's whole-buffer int8
// states restart their blocks at every rank's shard, so each rank's slice is self-contained,
// checkpointed like a stage-1 rank's own states.
void ZeroEngine::setup_states() {
  ComputeParamsSetup cs = compute_params_setup();
  cs.meter = &step_meter_;
  params_ = make_compute_params(std::move(cs));
  const auto& offload = config_.zero.offload_optimizer;
  MasterStoreOptions so;
  so.numel = static_cast<size_t>(stage() == 0 ? layout_->padded_numel() : layout_->shard_size());
  so.threads = options_.optimizer_threads;
  if (stage() == 0 && placement_.master_is_params) so.params_master = params_->flat();
  so.backend = options_.optimizer_backend;
  so.segment_numel = static_cast<size_t>(shard_.size);
  so.sub_groups.sub_group_elems = config_.zero.sub_group_size;
  so.sub_groups.buffer_count = offload.buffer_count;
  so.sub_groups.grads_in_tier = placement_.grads == placement::GradStore::kDisk;
  so.sub_groups.grads_streamed = placement_.grads == placement::GradStore::kStreamed;
  so.sub_groups.stream_buffers = offload.stream_buffers;
  so.sub_groups.stream_burst_elems = largest_bucket_piece();
  so.sub_groups.split_master = placement_.split_master;
  so.split_master = placement_.split_master && !placement_.optimizer_on_disk();
  store_ = make_master_store(placement_.optimizer, "zoff_rank" + std::to_string(comm_->rank()),
                             config_, so);
  if (store_->tiered() != nullptr) store_->tiered()->set_meter(&step_meter_);
  params_->attach(store_->master(), *store_);
  // The split master's copy half in memory: the shard the step writes (stage 3's on disk is
  // the output region; one copy per host binds its pieces in attach()).
  if (placement_.split_master && !placement_.params_on_disk() &&
      params_->optimizer_output().defined()) {
    store_->bind_compute_copy(params_->optimizer_output());
  }
  sink_ = std::make_unique<GradSink>(*store_, placement_, comm_->size());
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
    auto values = unit_values_fp32(*layout_, u, plan_, options_.param_init);
    comm_->broadcast(values, 0)->wait();
    // A split master holds no odd ties (optim/split_master.h): its copy is then the
    // compute parameters' rounding, whoever rounds.
    if (placement_.split_master)
      optim::split_master_settle(values.data_ptr<float>(), values.numel());
    // This rank's piece of the unit (stages 1-3; empty at stage 0, which is not sharded).
    const auto mine = values.narrow(0, rank * unit.shard_size, unit.shard_size);
    if (stage() > 0) {
      store_->fill(static_cast<size_t>(unit.shard_offset), mine.contiguous().data_ptr<float>(),
                   static_cast<size_t>(unit.shard_size));
    } else if (!placement_.master_is_params) {
      store_->fill(static_cast<size_t>(unit.offset), values.data_ptr<float>(),
                   static_cast<size_t>(unit.padded_numel));
    }
    params_->fill_unit(u, values, mine);
  }
  store_->finish_fill();
  params_->finish_fill(trainable_);
}

// This rank's piece of the largest bucket the reducer will hand the master store at once
// (setup_reducer's buckets: a unit each at stage 3), in shard elements.
int64_t ZeroEngine::largest_bucket_piece() const {
  const auto buckets =
      stage() == 3 ? layout_->unit_buckets() : layout_->buckets(config_.zero.reduce_bucket_size);
  int64_t most = 0;
  for (const auto& b : buckets) most = std::max(most, b.shard_size);
  return most;
}

void ZeroEngine::setup_reducer() {
  GradReducerOptions ro;
  ro.mode = grad_mode_for_stage(stage());
  ro.bucket_elems = config_.zero.reduce_bucket_size;
  ro.unit_buckets = stage() == 3;
  ro.overlap = config_.zero.overlap_comm;
  ro.shard_device = placement_.offloaded() ? torch::Device(torch::kCPU) : compute_device_;
  ro.pin_memory = placement_.pin_memory;
  ro.stage_on_host = on_device();
  ro.transfer = transfer_.get();
  ro.staging_dtype = compute_dtype_;
  params_->wire(&ro);
  sink_->wire(&ro);
  reducer_ = std::make_unique<GradReducer>(*layout_, trainable_, comm_, ro);
  sink_->set_reducer(reducer_.get());
}

torch::Tensor ZeroEngine::flat_params() const { return params_->flat(); }

void ZeroEngine::backward(const torch::Tensor& loss) {
  ZOFF_CHECK_ARG(loss.numel() == 1, "engine.backward: loss has ", loss.numel(),
                 " elements, expected a scalar");
  ZOFF_CHECK(
      micro_ < config_.gradient_accumulation_steps, "engine.backward called ", micro_ + 1,
      " times before step(); gradient_accumulation_steps = ", config_.gradient_accumulation_steps);
  sink_->check();
  const auto start = Clock::now();
  const bool boundary = micro_ + 1 == config_.gradient_accumulation_steps;
  if (micro_ == 0) meter_.reset();
  sink_->begin_backward(boundary);
  if (boundary && placement_.overlap_step) {
    // The disk step overlaps this backward: the lr of this step is known already.
    sink_->begin_step(config::lr_at(config_.scheduler, config_.optimizer.lr, applied_),
                      params_->step_output());
  } else if (boundary && !delayed_) {
    store_->prefetch_step();  // a disk store reads the step's first sub-groups meanwhile
  }
  meter_.sample_before_backward();
  reducer_->begin_backward(boundary);
  params_->begin_backward();
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
    params_->end_backward();
    sink_->abort_backward();
    throw;
  }
  {
    RECORD_USER_SCOPE("zoff::end_backward");  // flushes the last buckets
    const auto reduce_start = Clock::now();
    reducer_->end_backward();
    times_.backward_reduce_ms += ms_since(reduce_start);
  }
  params_->end_backward();
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
                  ? sink_->squares()
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
  const StepProgress waited = step_meter_.snapshot();
  times_.io_params_ms = waited.io_params_ms;
  times_.io_grad_window_ms = waited.io_grad_window_ms;
  times_.io_optimizer_ms = waited.io_optimizer_ms;
  stats.times = times_;
  times_ = StepTimes{};
  step_meter_.reset();
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
  sink_->check();
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
    if (!scaler_ && comm_->size() > 1 && !sink_->overlapping() && placement_.grads_in_memory()) {
      // The average over ranks and the norm's squares in one pass. Overlapped: averaged
      // range by range; gradients in the store: as they were written; fp16: by the unscale.
      squares =
          optim::divide_and_sum_squares(gradient_span(grads), static_cast<size_t>(grads.numel()),
                                        static_cast<float>(comm_->size()));
    }
    clip_and_measure(grads, squares, &stats);
    times_.grad_norm_ms += ms_since(norm_start);
  }
  stats.lr = config::lr_at(config_.scheduler, config_.optimizer.lr, applied_);
  update(grads, stats.lr);
  if (scaler_) scaler_->update(/*overflow=*/false, step_ + 1);
  finish_step();
  ++applied_;
  stats.step = ++step_;
  return stats;
}

// The optimizer step and its publication into the compute parameters: in the background
// (delayed update), finishing the step that overlapped backward, or now.
void ZeroEngine::update(const torch::Tensor& grads, double lr) {
  const auto start = Clock::now();
  if (delayed_ && step_ >= config_.zero.offload_optimizer.dpu_warmup_steps) {
    launch_delayed_update(grads, lr);
    times_.optimizer_ms += ms_since(start);
  } else if (sink_->overlapping()) {
    {
      RECORD_USER_SCOPE("zoff::optimizer_step");
      sink_->finish_step();
      times_.optimizer_ms += ms_since(start);
    }
    RECORD_USER_SCOPE("zoff::publish_params");
    params_->publish(&times_);
  } else {
    params_->update(*store_, grads.defined() ? grads.data_ptr<float>() : nullptr, lr, &times_);
  }
}

void ZeroEngine::finish_step() {
  sink_->reset();
  replicated_->broadcast_buffers();
  reducer_->zero_grads();
  micro_ = 0;
  meter_.mark_baseline();
}

// The update reads its own copy of the gradients (the reducer's buffer is refilled by the
// next backward) and writes the new compute values aside (the module reads the current ones
// meanwhile). synchronize() brings them in.
void ZeroEngine::launch_delayed_update(const torch::Tensor& grads, double lr) {
  delayed_->launch(grads, [this, lr](const torch::Tensor& g, const torch::Tensor& out) {
    store_->step(g.data_ptr<float>(), lr, params_->step_output(out));
    if (compute_dtype_ == torch::kFloat32) out.copy_(store_->master());
  });
}

void ZeroEngine::synchronize() {
  if (!update_pending()) return;
  torch::NoGradGuard no_grad;
  const auto wait_start = Clock::now();
  const torch::Tensor& out = delayed_->wait();  // rethrows what the update threw
  times_.optimizer_ms += ms_since(wait_start);  // what the delayed update did not hide
  params_->optimizer_output().copy_(out);
  params_->publish(&times_);
}

MemoryStats ZeroEngine::memory() const {
  MemoryStats m;
  params_->add_bytes(&m);
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
